package h1server

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// smugglingHandler counts its calls and puts what it saw of each request
// (method, target, version, Host, framing, the body it read and the
// trailers) in the X-Seen header of its answer, which a status without a
// body carries too. It reads the whole body, none of it on /ignore, two
// bytes of it on /partial, and on /status/NNN answers NNN, writing a body
// anyway.
func smugglingHandler(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var body []byte
		var err error
		switch r.URL.Path {
		case "/ignore":
		case "/partial":
			body = make([]byte, 2)
			var n int
			n, err = io.ReadFull(r.Body, body)
			body = body[:n]
		default:
			body, err = io.ReadAll(r.Body)
		}
		shown := fmt.Sprintf("%q", body)
		if len(body) > 64 {
			shown = fmt.Sprintf("(%d bytes)", len(body))
		}
		w.Header().Set("X-Seen", fmt.Sprintf("%s %s %s host=%q close=%v length=%d te=%q cl=%q body=%s err=%v trailer=%v",
			r.Method, r.RequestURI, r.Proto, r.Host, r.Close, r.ContentLength, r.TransferEncoding,
			r.Header["Content-Length"], shown, err, r.Trailer))
		if s, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			code, _ := strconv.Atoi(s)
			w.WriteHeader(code)
		}
		io.WriteString(w, "a body written anyway")
	})
}

// smugglingCase is one request, or several, as raw bytes.
type smugglingCase struct {
	name string
	// raw is sent at once, then slow a byte every slowByteGap to servers
	// whose ReadHeaderTimeout is slowHeaderTimeout, then late at once
	// after twice that timeout, then afterContinue once 100 Continue came.
	raw, slow, late, afterContinue string
	// stricter, when set, says why fanout's server refuses what net/http's
	// serves; lenient, why its handler gets what net/http's never sees and
	// that is harmless; otherStatus, why both refuse it before the handler
	// with other statuses. docs/security.md lists these rows.
	stricter, lenient, otherStatus string
}

const (
	slowHeaderTimeout = 300 * time.Millisecond
	// slowByteGap makes every slow row last over twice the timeout.
	slowByteGap = 20 * time.Millisecond
)

func smugglingCases() []smugglingCase {
	const host = "Host: localhost\r\n"
	req := func(target, headers, body string) string {
		return "POST " + target + " HTTP/1.1\r\n" + host + headers + "\r\n" + body
	}
	post := func(headers, body string) string { return req("/read", headers, body) }
	next := "GET /next HTTP/1.1\r\n" + host + "\r\n"
	smuggled := "GET /smuggled HTTP/1.1\r\n" + host + "\r\n"
	const hello = "5\r\nhello\r\n0\r\n\r\n" // chunked
	chunked := func(body string) string { return post("Transfer-Encoding: chunked\r\n", body) }
	te := func(value string) string { return post("Transfer-Encoding: "+value+"\r\n", hello+next) }
	// sizeLine is a chunked "hello" whose chunk-size line is line, then next.
	sizeLine := func(line string) string { return chunked(line + "\r\nhello\r\n0\r\n\r\n" + next) }
	// trailed is a chunked "hello" whose trailer section is fields, then next.
	trailed := func(fields string) string { return chunked("5\r\nhello\r\n0\r\n" + fields + "\r\n" + next) }
	get := func(target, headers string) string { return "GET " + target + " HTTP/1.1\r\n" + headers + "\r\n" }
	proto := func(version, headers string) string { return "GET /read " + version + "\r\n" + headers + "\r\n" }
	values := func(n int) string { // n header values, Host among them
		var b strings.Builder
		b.WriteString("GET /read HTTP/1.1\r\n" + host)
		for i := range n - 1 {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		return b.String() + "\r\n"
	}
	limit := DefaultMaxHeaderBytes + 4096 // what a request header may read, as in net/http
	sized := func(n int) string {         // a request header of n bytes
		head := "GET /read HTTP/1.1\r\n" + host + "X-Big: "
		return head + strings.Repeat("b", n-len(head)-4) + "\r\n\r\n"
	}
	chunks := func(n int, ext string) string {
		var b strings.Builder
		for range n {
			b.WriteString("1;" + ext + "\r\nx\r\n")
		}
		return b.String() + "0\r\n\r\n"
	}
	big := strings.Repeat("z", maxPostHandlerReadBytes+1)
	return []smugglingCase{
		// Content-Length and Transfer-Encoding.
		{name: "CL and TE: chunked wins, CL dropped", raw: post("Content-Length: 40\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"+smuggled)},
		{name: "TE and CL: chunked wins, CL dropped", raw: te("chunked\r\nContent-Length: 3")},
		{name: "CL and TE on HTTP/1.0: TE ignored", raw: "POST /read HTTP/1.0\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + next},
		{name: "duplicate equal CL", raw: post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"+next)},
		{name: "conflicting CL", raw: post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"+next)},
		{name: "CL +5", raw: post("Content-Length: +5\r\n", "hello"+next)},
		{name: "CL -1", raw: post("Content-Length: -1\r\n", "hello"+next)},
		{name: "CL with a space inside", raw: post("Content-Length: 1 0\r\n", "hello"+next)},
		{name: "CL with spaces around", raw: post("Content-Length:   5 \t\r\n", "hello"+next)},
		{name: "CL 5, 5", raw: post("Content-Length: 5, 5\r\n", "hello"+next)},
		{name: "CL 5,6", raw: post("Content-Length: 5,6\r\n", "hello"+next)},
		{name: "CL with leading zeros", raw: post("Content-Length: 005\r\n", "hello"+next)},
		{name: "CL empty", raw: post("Content-Length:\r\n", "hello"+next)},
		{name: "CL in hex", raw: post("Content-Length: 0x5\r\n", "hello"+next)},
		{name: "CL of 2^63-1", raw: post("Content-Length: 9223372036854775807\r\n", "hello")},
		{name: "CL of 2^63", raw: post("Content-Length: 9223372036854775808\r\n", "hello")},
		{name: "CL of 20 digits", raw: post("Content-Length: 99999999999999999999\r\n", "hello")},
		{name: "CL on a GET", raw: "GET /read HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\nhello" + next},

		// obs-fold and Transfer-Encoding variants.
		{name: "obs-fold, space", raw: get("/read", host+"X-A: a\r\n b\r\n")},
		{name: "obs-fold, tab", raw: get("/read", host+"X-A: a\r\n\tb\r\n")},
		{name: "obs-fold as the first header line", raw: get("/read", " X-A: a\r\n"+host)},
		{name: "obs-fold as the first header line, over 80 bytes", raw: get("/read", " X-A: "+strings.Repeat("a", 80)+"\r\n"+host)},
		{name: "obs-fold of TE", raw: te("\r\n chunked")},
		{name: "obs-fold of CL", raw: post("Content-Length: 5\r\n 6\r\n", "hello!"+next)},
		{name: "TE chunked, gzip", raw: te("chunked, gzip")},
		{name: "TE gzip, chunked", raw: te("gzip, chunked")},
		{name: "TE Chunked", raw: te("Chunked")},
		{name: "TE CHUNKED", raw: te("CHUNKED")},
		{name: "TE with a leading space", raw: te(" chunked")},
		{name: "TE with a trailing space", raw: te("chunked ")},
		{name: "TE with a vertical tab", raw: te("chunked\v")},
		{name: "TE chun ked", raw: te("chun ked")},
		{name: "TE xchunked", raw: te("xchunked")},
		{name: "TE identity", raw: post("Transfer-Encoding: identity\r\n", "hello"+next)},
		{name: "TE empty", raw: post("Transfer-Encoding:\r\nContent-Length: 5\r\n", "hello"+next)},
		{name: "TE chunked twice", raw: te("chunked\r\nTransfer-Encoding: chunked")},
		{name: "TE chunked,chunked", raw: te("chunked,chunked")},

		// Chunk framing.
		{name: "chunk size of 16 hex digits", raw: chunked("ffffffffffffffff\r\nhello\r\n0\r\n\r\n")},
		{name: "chunk size of 17 hex digits", raw: sizeLine("10000000000000005")},
		{name: "chunk size with leading zeros", raw: sizeLine("00000000000000000005")},
		{name: "chunk size 0x5", raw: sizeLine("0x5")},
		{name: "chunk size with junk", raw: sizeLine("5g")},
		{name: "chunk size negative", raw: sizeLine("-5")},
		{name: "chunk size with a leading space", raw: sizeLine(" 5")},
		{name: "chunk size with trailing spaces", raw: sizeLine("5 \t ")},
		{name: "chunk size missing", raw: sizeLine("")},
		{name: "chunk longer than its size", raw: sizeLine("3")},
		{name: "chunk data ends with bare LF", raw: chunked("5\r\nhello\n0\r\n\r\n" + next)},
		{name: "chunk lines with bare LF", raw: chunked("5\nhello\r\n0\n\n" + next)},
		{name: "chunk extension", raw: chunked("5;name=value\r\nhello\r\n0;last\r\n\r\n" + next)},
		{name: "chunk extension quoted", raw: sizeLine("5;name=\"a;b\\\"c\"")},
		{name: "chunk extension with a bare LF in quotes", raw: chunked("5;a=\"\n0\r\n\r\n" + smuggled + "\"\r\nhello\r\n0\r\n\r\n")},
		{name: "chunk extension of 4 KiB", raw: sizeLine("5;" + strings.Repeat("e", 4096))},
		{name: "chunk extensions, 16 KiB in all", raw: chunked(chunks(20, strings.Repeat("e", 1000)) + next)},
		{name: "chunk extensions, small in all", raw: chunked(chunks(20, "e") + next)},
		{name: "trailer", raw: post("Transfer-Encoding: chunked\r\nTrailer: X-T\r\n", "5\r\nhello\r\n0\r\nX-T: v\r\n\r\n"+next)},
		{name: "trailer not declared", raw: trailed("X-T: v\r\n")},
		{name: "Content-Length in the trailer", raw: trailed("Content-Length: 50\r\n")},
		{name: "Transfer-Encoding in the trailer", raw: trailed("Transfer-Encoding: chunked\r\n")},
		{name: "Content-Length declared as a trailer", raw: post("Transfer-Encoding: chunked\r\nTrailer: Content-Length\r\n", "5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n"+next)},
		{name: "Host declared as a trailer", raw: post("Transfer-Encoding: chunked\r\nTrailer: Host\r\n", "5\r\nhello\r\n0\r\nHost: evil\r\n\r\n"+next)},
		{name: "trailer with a bad name", raw: trailed("X T: v\r\n")},
		{name: "trailer obs-fold", raw: trailed("X-T: v\r\n w\r\n")},
		{name: "last chunk without final CRLF", raw: chunked("5\r\nhello\r\n0\r\n")},
		{name: "last chunk without final CRLF, then a request", raw: chunked("5\r\nhello\r\n0\r\n" + next)},
		{name: "no last chunk", raw: chunked("5\r\nhello\r\n")},

		// Line endings and bytes.
		{name: "bare LF line endings", raw: "GET /read HTTP/1.1\nHost: localhost\nX-A: a\n\n" + next},
		{name: "bare LF after the header, CRLF before", raw: "GET /read HTTP/1.1\r\nHost: localhost\r\n\n" + next},
		{name: "CR without LF in the request line", raw: "GET /read HTTP/1.1\rHost: localhost\r\n\r\n"},
		{name: "CR without LF in a value", raw: get("/read", host+"X-A: a\rb\r\n")},
		{name: "CR without LF ending a line", raw: get("/read", host+"X-A: a\rX-B: b\r\n")},
		{name: "NUL in a header name", raw: get("/read", host+"X-\x00A: v\r\n")},
		{name: "NUL in a header value", raw: get("/read", host+"X-A: a\x00b\r\n")},
		{name: "DEL in a header value", raw: get("/read", host+"X-A: a\x7fb\r\n")},
		{name: "control byte in a header value", raw: get("/read", host+"X-A: a\x01b\r\n")},
		{name: "tab in a header value", raw: get("/read", host+"X-A: a\tb\r\n")},
		{name: "byte 0x80 in a header value", raw: get("/read", host+"X-A: a\x80b\r\n")},
		{name: "control byte in a header name", raw: get("/read", host+"X-\x01A: v\r\n")},
		{name: "NUL in the target", raw: "GET /re\x00ad HTTP/1.1\r\n" + host + "\r\n"},
		{name: "space before the colon", raw: get("/read", host+"X-A : v\r\n")},
		{name: "space before the colon of CL", raw: post("Content-Length : 5\r\n", "hello"+next)},
		{name: "tab before the colon of TE", raw: post("Transfer-Encoding\t: chunked\r\n", hello+next)},
		{name: "empty header name", raw: get("/read", host+": v\r\n")},
		{name: "header line without a colon", raw: get("/read", host+"X-A v\r\n")},
		{name: "space in the method", raw: "GE T /read HTTP/1.1\r\n" + host + "\r\n"},
		{name: "two spaces after the method", raw: "GET  /read HTTP/1.1\r\n" + host + "\r\n"},
		{name: "CRLF before the request line", raw: "\r\n" + get("/read", host)},

		// Targets, Host and versions.
		{name: "absolute-form target", raw: get("http://localhost/read", host)},
		{name: "absolute-form target, another Host", raw: get("http://localhost/read", "Host: other.example\r\n")},
		{name: "absolute-form target, no Host", raw: get("http://localhost/read", "")},
		{name: "absolute-form target, malformed Host", raw: get("http://localhost/read", "Host: a b\r\n")},
		{name: "absolute-form target, two Hosts", raw: get("http://localhost/read", host+host)},
		{name: "absolute-form target with userinfo", raw: get("http://user:pw@localhost/read", host)},
		{name: "authority-form target on GET", raw: get("localhost:80", host)},
		{name: "asterisk-form target on GET", raw: get("*", host)},
		{name: "OPTIONS *", raw: "OPTIONS * HTTP/1.1\r\n" + host + "\r\n" + next,
			lenient: "net/http's server answers OPTIONS * itself; fanout's handler refuses it"},
		{name: "missing Host on HTTP/1.1", raw: get("/read", "")},
		{name: "missing Host on HTTP/1.0", raw: proto("HTTP/1.0", "")},
		{name: "empty Host", raw: get("/read", "Host:\r\n")},
		{name: "empty Host on HTTP/1.0", raw: proto("HTTP/1.0", "Host:\r\n")},
		{name: "duplicate Host", raw: get("/read", host+host)},
		{name: "duplicate Host, different", raw: get("/read", host+"Host: other.example\r\n")},
		{name: "Host with userinfo", raw: get("/read", "Host: user@localhost\r\n")},
		{name: "Host with a path", raw: get("/read", "Host: localhost/x\r\n")},
		{name: "Host with a bad port", raw: get("/read", "Host: localhost:x\r\n")},
		{name: "HTTP/1.0 without keep-alive", raw: proto("HTTP/1.0", "") + next},
		{name: "HTTP/1.0 with keep-alive", raw: proto("HTTP/1.0", "Connection: keep-alive\r\n") + next},
		{name: "HTTP/1.1 with Connection: close", raw: get("/read", host+"Connection: close\r\n") + next},
		{name: "HTTP/1.1 with Connection: close and junk", raw: get("/read", host+"Connection: Close 0\r\n") + next},
		{name: "HTTP/1.0 with keep-alive and junk", raw: proto("HTTP/1.0", "Connection: keep-Alive 0\r\n") + next},
		{name: "HTTP/1.0 with keep-alive on a second Connection line", raw: proto("HTTP/1.0", "Connection: x\r\nConnection: keep-alive\r\n") + next},
		{name: "HTTP/1.0 with keep-alive in a list", raw: proto("HTTP/1.0", "Connection: te,\tkeep-alive\r\n") + next},
		{name: "HTTP/0.9 request line", raw: "GET /read\r\n\r\n"},
		{name: "HTTP/0.9 version", raw: proto("HTTP/0.9", host)},
		{name: "HTTP/2.0 request line", raw: proto("HTTP/2.0", host)},
		{name: "PRI * HTTP/2.0 with a header", raw: "PRI * HTTP/2.0\r\n" + host + "\r\n",
			stricter: "the HTTP/2 preface goes to net/http's h2c server; any other HTTP/2.0 request line is 505"},
		{name: "PRI * HTTP/2.0 without headers", raw: "PRI * HTTP/2.0\r\n\r\n",
			stricter: "the HTTP/2 preface goes to net/http's h2c server; any other HTTP/2.0 request line is 505"},
		{name: "HTTP/1.2", raw: proto("HTTP/1.2", host)},
		{name: "HTTP/3.0", raw: proto("HTTP/3.0", host)},
		{name: "HTTP/1.10", raw: proto("HTTP/1.10", host)},
		{name: "lower-case version", raw: proto("http/1.1", host)},
		{name: "unknown version", raw: proto("FOO/1.1", host)},

		// Pipelining, bodies left unread, 100 Continue.
		{name: "two requests in one write", raw: get("/read", host) + next},
		{name: "three requests in one write", raw: get("/read", host) + next + smuggled},
		{name: "body not read, then a request", raw: req("/ignore", "Content-Length: 5\r\n", "hello") + next},
		{name: "body not read, then two requests", raw: req("/ignore", "Content-Length: 5\r\n", "hello") + next + smuggled},
		{name: "body partly read, then a request", raw: req("/partial", "Content-Length: 5\r\n", "hello") + next},
		{name: "chunked body not read, then a request", raw: req("/ignore", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n") + next},
		{name: "chunked body partly read, then a request", raw: req("/partial", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n") + next},
		{name: "body over 256 KiB not read, then a request", raw: req("/ignore", "Content-Length: "+strconv.Itoa(len(big))+"\r\n", big) + next},
		{name: "body shorter than its CL, then a request", raw: post("Content-Length: 10\r\n", "hello") + next},
		{name: "CRLF after a POST body", raw: post("Content-Length: 5\r\n", "hello\r\n") + next},
		{name: "two CRLF after a POST body", raw: post("Content-Length: 5\r\n", "hello\r\n\r\n") + next},
		{name: "100-continue, body read", raw: post("Content-Length: 5\r\nExpect: 100-continue\r\n", ""), afterContinue: "hello" + next},
		{name: "100-continue, body not read", raw: req("/ignore", "Content-Length: 5\r\nExpect: 100-continue\r\n", ""), afterContinue: "hello" + next},
		{name: "100-continue, body sent anyway and not read", raw: req("/ignore", "Content-Length: 5\r\nExpect: 100-continue\r\n", "hello") + next},
		{name: "100-continue, body sent anyway and read", raw: post("Content-Length: 5\r\nExpect: 100-continue\r\n", "hello") + next},
		{name: "100-continue on HTTP/1.0", raw: "POST /read HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello"},
		{name: "100-Continue in capitals", raw: post("Content-Length: 5\r\nExpect: 100-Continue\r\n", ""), afterContinue: "hello" + next},
		{name: "100-continue without a body", raw: get("/read", host+"Expect: 100-continue\r\n") + next},
		{name: "unknown expectation", raw: post("Content-Length: 5\r\nExpect: 200-ok\r\n", "hello") + next},
		{name: "100-continue among other tokens", raw: post("Content-Length: 5\r\nExpect: 100-continue, x\r\n", ""), afterContinue: "hello" + next},
		{name: "100-continue then junk on HTTP/1.0", raw: "POST /read HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-Continue 0\r\n\r\nhello"},
		{name: "100-continue inside a longer token", raw: post("Content-Length: 5\r\nExpect: x100-continue\r\n", "hello") + next},
		{name: "100-continue on a second Expect line", raw: post("Content-Length: 5\r\nExpect: 200-ok\r\nExpect: 100-continue\r\n", "hello") + next},

		// Answers that carry no body, whatever the handler writes.
		{name: "HEAD", raw: "HEAD /read HTTP/1.1\r\n" + host + "\r\n"},
		{name: "HEAD, then a request", raw: "HEAD /read HTTP/1.1\r\n" + host + "\r\n" + "HEAD /next HTTP/1.1\r\n" + host + "\r\n"},
		{name: "HEAD of a 204", raw: "HEAD /status/204 HTTP/1.1\r\n" + host + "\r\n"},
		{name: "100 by the handler", raw: get("/status/100", host) + next},
		{name: "103 by the handler", raw: get("/status/103", host) + next},
		{name: "101 without an upgrade", raw: get("/status/101", host) + next},
		{name: "204 with a body", raw: get("/status/204", host) + next},
		{name: "304 with a body", raw: get("/status/304", host) + next},
		{name: "204 to a POST, body not read", raw: req("/status/204", "Content-Length: 5\r\n", "hello") + next},

		// Slow clients and header limits.
		// A slow header trickles a value: wherever the timeout cuts it,
		// what came is a whole line (a cut request line would be
		// malformed, and answered 400 by both servers).
		{name: "slow header, past the header timeout", raw: "GET /read HTTP/1.1\r\n" + host + "X-Slow: ", slow: strings.Repeat("s", 40) + "\r\n\r\n"},
		{name: "slow second header, past the header timeout", raw: get("/read", host) + "GET /next HTTP/1.1\r\n" + host + "X-Slow: ", slow: strings.Repeat("s", 40) + "\r\n\r\n"},
		{name: "next request after an idle time past the header timeout", raw: get("/read", host), late: next},
		{name: "slow body, past the header timeout", raw: post("Content-Length: 40\r\n", ""), slow: strings.Repeat("b", 40)},
		{name: "slow chunked body, past the header timeout", raw: chunked(""), slow: strings.Repeat("1\r\nb\r\n", 8) + "0\r\n\r\n"},
		{name: "499 header values", raw: values(maxHeaderValues - 1)},
		{name: "500 header values", raw: values(maxHeaderValues)},
		{name: "501 header values", raw: values(maxHeaderValues + 1)},
		{name: "500 header values, TE among them", raw: strings.Replace(strings.TrimSuffix(values(maxHeaderValues-1), "\r\n"),
			"GET", "POST", 1) + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "501 header values, TE among them", raw: strings.Replace(strings.TrimSuffix(values(maxHeaderValues), "\r\n"),
			"GET", "POST", 1) + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "501 header values, two of them Trailer lines", raw: strings.Replace(strings.TrimSuffix(values(maxHeaderValues-2), "\r\n"),
			"GET", "POST", 1) + "Transfer-Encoding: chunked\r\nTrailer: A\r\nTrailer: B\r\n\r\n0\r\n\r\n",
			lenient: "the parser keeps one Trailer line of several: counted as one"},
		{name: "501 header values, two of them TE lines on HTTP/1.0", raw: strings.Replace(strings.TrimSuffix(values(maxHeaderValues-1), "\r\n"),
			"HTTP/1.1", "HTTP/1.0", 1) + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
			lenient: "the parser drops Transfer-Encoding on HTTP/1.0: not counted"},
		{name: "500 trailer names declared", raw: post("Transfer-Encoding: chunked\r\nTrailer: "+trailerNames(maxHeaderValues, 0)+"\r\n", "0\r\n\r\n")},
		{name: "501 trailer names declared", raw: post("Transfer-Encoding: chunked\r\nTrailer: "+trailerNames(maxHeaderValues+1, 0)+"\r\n", "0\r\n\r\n")},
		{name: "501 trailer names declared, one twice", raw: post("Transfer-Encoding: chunked\r\nTrailer: "+trailerNames(maxHeaderValues+1, 1)+"\r\n", "0\r\n\r\n"),
			lenient: "the parser keeps the distinct names: counted once"},
		{name: "500 header values, the last one cut off", raw: strings.TrimSuffix(values(maxHeaderValues), "\r\n\r\n")},
		{name: "501 header values, the last one cut off", raw: strings.TrimSuffix(values(maxHeaderValues+1), "\r\n\r\n"),
			otherStatus: tooManyLinesApart},
		{name: "500 header values, then a line without a colon", raw: strings.TrimSuffix(values(maxHeaderValues), "\r\n") + "no colon\r\n\r\n"},
		{name: "501 header values, then a line without a colon", raw: strings.TrimSuffix(values(maxHeaderValues+1), "\r\n") + "no colon\r\n\r\n",
			otherStatus: tooManyLinesApart},
		{name: "header one byte under the limit", raw: sized(limit - 1)},
		{name: "header at the limit", raw: sized(limit)},
		{name: "header one byte over the limit", raw: sized(limit + 1)},
		{name: "header at the limit, then a request", raw: sized(limit) + next},
	}
}

// trailerNames is a Trailer value of n names, the last repeats of them
// the same.
func trailerNames(n, repeats int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "T" + strconv.Itoa(min(i, n-1-repeats))
	}
	return strings.Join(names, ",")
}

// smuggleVerdict is what a client and the handler saw of tc: the
// responses, how the connection ended, and how many requests reached the
// handler.
type smuggleVerdict struct {
	transcript string
	calls      int64
	status     int // of the first response, 0 if none
}

func (v smuggleVerdict) String() string {
	return fmt.Sprintf("%shandler calls: %d\n", v.transcript, v.calls)
}

func smuggle(t *testing.T, addr string, calls *atomic.Int64, tc smugglingCase) smuggleVerdict {
	t.Helper()
	before := calls.Load()
	transcript := converse(t, addr, conversation{raw: []byte(tc.raw), slow: []byte(tc.slow), byteGap: slowByteGap,
		late: []byte(tc.late), pause: 2 * slowHeaderTimeout, afterContinue: []byte(tc.afterContinue)})
	v := smuggleVerdict{transcript: transcript, calls: calls.Load() - before}
	if _, rest, ok := strings.Cut(transcript, "HTTP/1."); ok && len(rest) > 5 {
		v.status, _ = strconv.Atoi(rest[2:5])
	}
	return v
}

// TestSmuggling sends each request of the corpus, request smuggling and
// framing cases, to fanout's server and to net/http's with the same
// handler, and wants the same verdict: the responses (status, framing,
// what the handler saw of method, target, Host, Content-Length,
// Transfer-Encoding, body and trailers), how the connection ended and
// how many requests the handler got. A row marked stricter must instead be
// refused by fanout's server before the handler, and be listed in
// docs/security.md.
func TestSmuggling(t *testing.T) {
	var oursCalls, refCalls atomic.Int64
	ours, _ := startH1(t, smugglingHandler(&oursCalls), Config{})
	ref := startNetHTTP(t, smugglingHandler(&refCalls))
	timeout := func(s *http.Server) { s.ReadHeaderTimeout = slowHeaderTimeout }
	oursSlow, _ := startH1(t, smugglingHandler(&oursCalls), Config{ReadHeaderTimeout: slowHeaderTimeout})
	refSlow := startNetHTTP(t, smugglingHandler(&refCalls), timeout)
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tc := range smugglingCases() {
		if names[tc.name] {
			t.Fatalf("two rows named %q", tc.name)
		}
		names[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			o, r := ours, ref
			if tc.slow != "" || tc.late != "" {
				o, r = oursSlow, refSlow
			}
			want := smuggle(t, r, &refCalls, tc)
			got := smuggle(t, o, &oursCalls, tc)
			switch {
			case tc.stricter != "":
				if !refused(got) || refused(want) {
					t.Errorf("sent %s\nwant fanout's server to refuse what net/http's serves (%s); fanout's:\n%s\nnet/http's:\n%s",
						shorten(tc.raw), tc.stricter, got, want)
				}
			case tc.otherStatus != "":
				if !refused(got) || !refused(want) || got.status == want.status {
					t.Errorf("sent %s\nwant both servers to refuse it with other statuses (%s); fanout's:\n%s\nnet/http's:\n%s",
						shorten(tc.raw), tc.otherStatus, got, want)
				}
			case tc.lenient != "":
				if got.calls <= want.calls {
					t.Errorf("sent %s\nwant fanout's handler to get what net/http's never sees (%s); fanout's:\n%s\nnet/http's:\n%s",
						shorten(tc.raw), tc.lenient, got, want)
				}
			default:
				if got.String() != want.String() {
					t.Errorf("sent %s\nfanout's server:\n%s\nnet/http's:\n%s", shorten(tc.raw+tc.slow+tc.late+tc.afterContinue), got, want)
				}
				return
			}
			if !strings.Contains(string(doc), "| "+tc.name+" |") {
				t.Errorf("docs/security.md has no row %q in its tables of cases where the servers differ", "| "+tc.name+" |")
			}
		})
	}
}

// tooManyLinesApart is why a header of over 500 lines that ends in a fault
// gets other statuses: net/http's server counts the lines as it parses
// them and answers 431 at the 501st, before the fault; fanout's counts
// them after the parse, which fails first, and answers 400.
const tooManyLinesApart = "net/http counts lines while parsing, fanout after: 431 there, 400 here"

// refused says the server answered an error before the handler saw
// anything.
func refused(v smuggleVerdict) bool { return v.calls == 0 && v.status >= 400 }

// shorten quotes raw for a failure message, its middle cut when long.
func shorten(raw string) string {
	if len(raw) <= 400 {
		return strconv.Quote(raw)
	}
	return fmt.Sprintf("%q...(%d bytes)...%q", raw[:200], len(raw)-400, raw[len(raw)-200:])
}
