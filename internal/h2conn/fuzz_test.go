//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; the peer frames HTTP/2 by hand with it, as peer_test.go does.

package h2conn

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"golang.org/x/net/http2"
)

// FuzzReadPath drives the connection's reading side from a scripted
// server: the fuzz input is a list of operations, each writing one or a
// few frames to the client (a well-formed response's HEADERS, split into
// CONTINUATION or not; DATA; trailers; RST_STREAM; GOAWAY; SETTINGS;
// WINDOW_UPDATE; PING; any frame at all, type, flags, stream and payload
// from the input; the server hanging up), while a GET (stream 1) and a
// POST (stream 3) wait for their answers and read their bodies. It runs
// in a synctest bubble, so that after every operation the client has
// done all it will do, and checks:
//
//   - nothing panics, and every frame the client writes back parses;
//   - the GET's body never delivers a byte the server did not send on
//     stream 1, in order; and when its read ends without error, it
//     delivered all of it (while only well-formed frames touched the
//     stream);
//   - once the connection is closed, both RoundTrips and body reads
//     have returned: with data or an error, never hanging;
//   - no goroutine of the connection outlives it (synctest.Test fails
//     when a goroutine of the bubble is left blocked).
//
// The seeds (in the code and testdata/fuzz/FuzzReadPath) are a plain
// answer, a split header block with trailers, a reset, a GOAWAY,
// protocol errors, and more DATA than the stream window allows.
func FuzzReadPath(f *testing.F) {
	// Operations: 0 HEADERS [stream, split, status, end, pad]; 1 DATA
	// [stream, length, end]; 2 trailers [stream]; 3 any frame [type,
	// flags, stream, length, payload]; 4 RST_STREAM [stream, code]; 5
	// GOAWAY [last, code]; 6 SETTINGS [id, 4 bytes]; 7 WINDOW_UPDATE
	// [stream, 4 bytes]; 8 PING [ack, byte]; 9 hang up. Stream 0 is the
	// GET's (1), 1 the POST's (3).
	for _, seed := range [][]byte{
		// 200 on 1, then DATA of 3 bytes ending it.
		{0, 0, 0, 0, 0, 0, 1, 0, 3, 1},
		// A header block split into CONTINUATION on 3, DATA, trailers; a
		// 204 ending 1.
		{0, 1, 1, 0, 0, 5, 1, 1, 5, 0, 2, 1, 0, 0, 0, 1, 1, 0},
		// RST_STREAM on 1 mid-body, then GOAWAY.
		{0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 4, 0, 8, 5, 0, 2},
		// SETTINGS, a WINDOW_UPDATE of 0 on the connection (a protocol
		// error), PING.
		{6, 4, 0, 0, 0, 1, 7, 0, 0, 0, 0, 0, 8, 0, 7},
		// DATA on an idle stream, then the server hangs up.
		{3, 0, 0, 5, 4, 'x', 'y', 'z', 'w', 9},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 4<<10 {
			return // a longer script finds nothing a shorter one does not
		}
		synctest.Test(t, func(t *testing.T) { runReadScript(t, script) })
	})
}

// readOutcome is what one request saw.
type readOutcome struct {
	done    chan struct{}
	status  int
	body    []byte
	rtErr   error
	readErr error
}

func startRead(p *testPeer, req *http.Request) *readOutcome {
	o := &readOutcome{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		resp, err := p.cc.RoundTrip(req)
		if err != nil {
			o.rtErr = err
			return
		}
		o.status = resp.StatusCode
		o.body, o.readErr = io.ReadAll(resp.Body)
		resp.Body.Close()
	}()
	return o
}

func runReadScript(t *testing.T, script []byte) {
	p := newTestPeer(t, Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 128 << 10})
	p.greet()
	get, _ := http.NewRequest(http.MethodGet, "https://kubernetes/api/v1/pods?watch=true", nil)
	post, _ := http.NewRequest(http.MethodPost, "https://kubernetes/api/v1/namespaces/ns/configmaps", strings.NewReader(strings.Repeat("b", 100)))
	reads := []*readOutcome{startRead(p, get)}
	synctest.Wait()
	reads = append(reads, startRead(p, post))
	drain := func() {
		synctest.Wait()
		p.readFrames() // fails the test on a frame that does not parse
	}
	drain()

	in := bytes.NewReader(script)
	next := func() byte {
		b, _ := in.ReadByte() // 0 once the script is over
		return b
	}
	var sent1 []byte // DATA the server sent on stream 1 before its END_STREAM
	ended1 := false  // END_STREAM sent on stream 1
	clean1 := true   // only well-formed frames touched stream 1
	hungUp := false
	stream := func() uint32 { return uint32(next()%2)*2 + 1 } // 1 or 3
	statuses := []string{"200", "204", "100", "404", "301", "0", "abc"}
	for in.Len() > 0 && !hungUp {
		switch op := next() % 10; op {
		case 0: // a response's header block, whole or split
			id, split := stream(), next()&1 == 1
			status := statuses[int(next())%len(statuses)]
			end := next()&1 == 1
			block := p.headerBlock(":status", status, "content-type", "application/json", "x-fuzz", strings.Repeat("h", int(next())))
			if id == 1 && (status == "100" || status == "0" || status == "abc") {
				clean1 = false // an informational or broken status is not an answer
			}
			if split && len(block) > 1 {
				half := len(block) / 2
				_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:half], EndStream: end})
				_ = p.fr.WriteContinuation(id, true, block[half:])
			} else {
				_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: end, EndHeaders: true})
			}
			if id == 1 && end {
				ended1 = true
			}
		case 1: // DATA
			id, n, end := stream(), int(next()), next()&1 == 1
			data := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
			_ = p.fr.WriteData(id, end, data)
			if id == 1 && !ended1 {
				sent1 = append(sent1, data...)
				ended1 = end
			}
		case 2: // trailers
			id := stream()
			_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.headerBlock("x-trailer", "v"), EndStream: true, EndHeaders: true})
			if id == 1 {
				ended1 = true
			}
		case 3: // any frame at all
			typ, flags, id, n := http2.FrameType(next()%12), http2.Flags(next()), uint32(next()%6), int(next()%32)
			payload := make([]byte, n)
			k, _ := in.Read(payload)
			payload = payload[:k]
			_ = p.fr.WriteRawFrame(typ, flags, id, payload)
			if id == 1 || id == 0 {
				clean1 = false
			}
			if id == 1 && !ended1 {
				switch typ {
				case http2.FrameData: // its data counts, as a well-formed DATA's does
					data := payload
					if flags.Has(http2.FlagDataPadded) {
						if len(data) == 0 || int(data[0]) > len(data)-1 {
							data = nil // a padding error: a connection error, nothing delivered
						} else {
							data = data[1 : len(data)-int(data[0])]
						}
					}
					sent1 = append(sent1, data...)
					ended1 = flags.Has(http2.FlagDataEndStream)
				case http2.FrameHeaders:
					ended1 = flags.Has(http2.FlagHeadersEndStream)
				}
			}
		case 4: // RST_STREAM
			id := stream()
			_ = p.fr.WriteRSTStream(id, http2.ErrCode(next()%14))
			if id == 1 {
				clean1 = false
			}
		case 5: // GOAWAY
			_ = p.fr.WriteGoAway(uint32(next()%6), http2.ErrCode(next()%14), nil)
			clean1 = false
		case 6: // SETTINGS
			id, v := http2.SettingID(next()%8), binary.BigEndian.Uint32([]byte{next(), next(), next(), next()})
			_ = p.fr.WriteSettings(http2.Setting{ID: id, Val: v})
			clean1 = false // a bad value closes the connection
		case 7: // WINDOW_UPDATE, 0 and overflowing increments included
			id, inc := uint32(next()%4), binary.BigEndian.Uint32([]byte{next(), next(), next(), next()})&(1<<31-1)
			_ = p.fr.WriteWindowUpdate(id, inc)
			clean1 = false
		case 8: // PING
			_ = p.fr.WritePing(next()&1 == 1, [8]byte{next()})
		case 9: // the server hangs up
			p.s2c.close()
			hungUp = true
		}
		drain()
	}

	p.cc.Close()
	synctest.Wait()
	for i, o := range reads {
		select {
		case <-o.done:
		default:
			t.Fatalf("request %d: RoundTrip or its body read still blocked after Close", i)
		}
	}
	g := reads[0]
	if g.rtErr != nil {
		return
	}
	if !bytes.HasPrefix(sent1, g.body) {
		t.Fatalf("the GET's body delivered %d bytes that are not a prefix of the %d the server sent on its stream", len(g.body), len(sent1))
	}
	if clean1 && g.readErr == nil && g.status != http.StatusNoContent && !bytes.Equal(g.body, sent1) {
		t.Fatalf("the GET's body ended cleanly after %d bytes, the server sent %d", len(g.body), len(sent1))
	}
}
