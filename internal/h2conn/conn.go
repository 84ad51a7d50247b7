//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; this client uses only its Framer, hpack and error types, which net/http does not export.

package h2conn

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// maxHeaderListSize bounds a response's header block, as x/net's default.
const maxHeaderListSize = 10 << 20

// maxWindow is the largest flow-control window HTTP/2 allows (RFC 9113
// 6.9.1), and maxStreamID the last stream ID (5.1.1).
const (
	maxWindow   = 1<<31 - 1
	maxStreamID = 1<<31 - 1
)

// ErrConnClosing is the error of a RoundTrip that found its connection
// closing (or gone away, or at its stream limit) before the request was
// written: nothing was sent, so another connection may take it.
var ErrConnClosing = errors.New("fanout HTTP/2 client: connection closing before the request was sent")

// ErrStreamGoneAway is wrapped in the error of a stream above a GOAWAY's
// last stream ID: the server did not process it.
var ErrStreamGoneAway = errors.New("fanout HTTP/2 client: the server's GOAWAY left this stream unprocessed")

// Unprocessed reports whether err, from RoundTrip, proves that the
// server did not process the request, so that it may be sent again
// elsewhere: a stream above a GOAWAY's last stream ID (ErrStreamGoneAway)
// or one the server reset with REFUSED_STREAM before answering. Any other
// error may follow processing (a reset stream, a connection lost
// mid-response, an http2.GoAwayError naming the stream as received). A
// RoundTrip that returns ErrConnClosing wrote nothing either; the caller
// tries another connection for it before giving up.
func Unprocessed(err error) bool {
	if errors.Is(err, ErrStreamGoneAway) {
		return true
	}
	var se http2.StreamError
	return errors.As(err, &se) && se.Code == http2.ErrCodeRefusedStream
}

// Conn is one HTTP/2 client connection. Its methods are safe for
// concurrent use.
type Conn struct {
	conn net.Conn
	cfg  Config
	tls  *tls.ConnectionState // for Response.TLS; nil if conn is not TLS

	// wmu guards the writing side: the framer's writes, the HPACK
	// encoder, and stream IDs (which must go out in order).
	wmu    sync.Mutex
	bw     *bufio.Writer
	fr     *http2.Framer
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32

	// mu guards the fields below and every stream's state.
	mu          sync.Mutex
	streams     map[uint32]*stream
	maxStreams  uint32
	maxFrame    uint32
	peerWindow  int       // the server's SETTINGS_INITIAL_WINDOW_SIZE
	sendWindow  int       // what fanout may still send on the connection
	sendCond    sync.Cond // request bodies wait on it for window; L is mu
	goAway      bool      // a GOAWAY came: no new streams
	lastStream  uint32    // its last stream ID
	goAwayCode  http2.ErrCode
	closing     bool // no new streams; close when the last one ends
	err         error
	idleSince   time.Time
	connUnacked int // bytes read by bodies, not yet given back to the connection window

	// reads counts the frames read; the timer's check compares it with
	// what it saw last (seen, at seenAt: the first check that saw that
	// count) to tell how long the connection has been silent, without a
	// clock read per frame.
	reads    atomic.Uint64
	timer    *time.Timer // health and idle checks
	seen     uint64      // the timer's own
	seenAt   time.Time   // the timer's own
	pingSent time.Time   // the timer's own: an unanswered PING
	// writeStuck is the timer's own: when it first found a write holding
	// wmu with the connection silent.
	writeStuck time.Time
	pinged     atomic.Bool // a PING is out; the read loop clears it on the ACK
}

// stream is one request's stream. Its fields are guarded by its
// connection's mu.
type stream struct {
	cc  *Conn
	id  uint32
	req *http.Request

	res     *http.Response
	headers chan struct{} // closed when res is set or err is
	buf     []byte        // data received, not yet read
	off     int
	got     int64 // data bytes received, checked against wantLen
	// wantLen is the answer's Content-Length, -1 if none: the read loop's
	// own copy, since RoundTrip's caller may change res.ContentLength
	// (transparent gzip does) while data still arrives.
	wantLen int64
	// sendWindow is what fanout may still send of the request body.
	sendWindow int
	// trailer holds the answer's trailers until the body's EOF, when
	// Read moves them to Response.Trailer (ReverseProxy reads that map
	// while the body streams).
	trailer http.Header
	unacked int // bytes read, not yet given back to the stream's window
	window  int // what the server may still send
	// size is the stream's window as granted: what the server may send,
	// what is buffered and what was read but not given back add up to it.
	// With a WindowBudget, borrowed of it came from the budget and the
	// rest is MinReceiveBufferPerStream; filled says whether the server
	// used most of the window since it was last given back (the window,
	// not the server, limited the stream).
	size     int
	borrowed int
	filled   bool
	// waited says whether the reader found nothing to read since the
	// window was last given back: it keeps up with what arrives.
	waited bool
	// cycle is when the window was last given back (or the stream
	// began), with a WindowBudget.
	cycle time.Time
	ended bool // END_STREAM received
	err   error
	cond  sync.Cond // a body Read waits on it; L is the connection's mu
	stop  func() bool
	body  *onceCloser // the request body while writeBody sends it
}

// New starts an HTTP/2 client connection over nc, which is dialled and,
// for TLS, handshaken with ALPN "h2" already: it writes the client
// preface and SETTINGS, and starts the connection's reading goroutine
// and its health timer. nc belongs to the Conn from then on; if New
// fails, closing nc is the caller's.
func New(nc net.Conn, cfg Config) (*Conn, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("h2conn: Config.%w", err)
	}
	cc := &Conn{
		conn: nc, cfg: cfg,
		nextID:     1,
		streams:    map[uint32]*stream{},
		maxStreams: 100, // until the server's SETTINGS say
		maxFrame:   16 << 10,
		peerWindow: InitialWindow,
		sendWindow: InitialWindow,
	}
	cc.sendCond.L = &cc.mu
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		cc.tls = &st
	}
	cc.bw = bufio.NewWriterSize(nc, 4<<10)
	cc.fr = http2.NewFramer(cc.bw, bufio.NewReaderSize(nc, 4<<10))
	cc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cc.fr.MaxHeaderListSize = maxHeaderListSize
	cc.fr.SetMaxReadFrameSize(1 << 20)
	cc.henc = hpack.NewEncoder(&cc.hbuf)
	cc.idleSince = time.Now()

	nc.SetWriteDeadline(time.Now().Add(cfg.PrefaceTimeout))
	cc.bw.WriteString(http2.ClientPreface)
	cc.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cc.initialWindow())},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListSize},
	)
	// As x/net: the connection window grows by the whole configured
	// size, on top of the initial 65,535 bytes (Config caps it so the sum
	// fits).
	cc.fr.WriteWindowUpdate(0, uint32(cfg.MaxReceiveBufferPerConnection))
	err = cc.bw.Flush()
	nc.SetWriteDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("writing the HTTP/2 preface: %w", err)
	}
	cc.seenAt = time.Now()
	cc.timer = time.AfterFunc(cc.checkEvery(), cc.check)
	go cc.readLoop()
	return cc, nil
}

// checkEvery is the timer's period: a fifth of ReadIdleTimeout, so that a
// connection that falls silent gets its PING between ReadIdleTimeout and
// 1.2 × ReadIdleTimeout after its last frame, and is closed at most
// 1.2 × ReadIdleTimeout + PingTimeout after it (9 s with the defaults),
// whatever the phase of the timer when it fell silent. A period of
// ReadIdleTimeout itself would let that be anything up to
// 2 × ReadIdleTimeout + PingTimeout.
func (cc *Conn) checkEvery() time.Duration {
	return max(min(cc.cfg.ReadIdleTimeout/silenceSteps, cc.cfg.IdleConnTimeout), time.Millisecond)
}

// silenceSteps is how many checks a ReadIdleTimeout spans.
const silenceSteps = 5

// CanTakeStream reports whether a RoundTrip now would get a stream: the
// connection is open, neither going away nor closing, and below the
// server's SETTINGS_MAX_CONCURRENT_STREAMS. A pool picks a connection
// with it; RoundTrip may still return ErrConnClosing if another request
// took the last stream meanwhile.
func (cc *Conn) CanTakeStream() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err == nil && !cc.goAway && !cc.closing && uint32(len(cc.streams)) < cc.maxStreams
}

// InFlight reports how many streams the connection carries. A
// connection that can take no stream (CanTakeStream) and carries none is
// of no use until its server's SETTINGS change: a pool closes it.
func (cc *Conn) InFlight() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.streams)
}

// CloseWhenIdle makes the connection take no new stream and close once
// its last stream ends; an idle one closes now.
func (cc *Conn) CloseWhenIdle() {
	cc.mu.Lock()
	cc.closing = true
	idle := len(cc.streams) == 0
	cc.mu.Unlock()
	if idle {
		cc.fail(ErrConnClosing)
	}
}

// Close closes the connection now; streams still open fail.
func (cc *Conn) Close() { cc.fail(ErrConnClosing) }

// RoundTrip writes req's HEADERS (and starts writing its body) on a new
// stream, and waits for the answer's HEADERS. It does not retry: an
// error wrapping ErrConnClosing means nothing was written and the caller
// may try another connection; see Unprocessed for what else proves the
// server did not process req. The answer's body holds no goroutine while
// it is read. The request URL's scheme is sent as "https".
func (cc *Conn) RoundTrip(req *http.Request) (*http.Response, error) {
	return cc.roundTrip(req, false)
}

// RoundTripShort is RoundTrip for a short request, one whose answer is
// read as it comes and ends: with a WindowBudget its stream starts with
// ShortAnswerWindow while the budget has room (a WINDOW_UPDATE sent with
// its HEADERS), so that an answer of up to that size needs no round trip
// for its window to grow. It gives the bytes back as any stream does.
func (cc *Conn) RoundTripShort(req *http.Request) (*http.Response, error) {
	return cc.roundTrip(req, true)
}

func (cc *Conn) roundTrip(req *http.Request, short bool) (*http.Response, error) {
	ctx := req.Context()
	iw := cc.initialWindow()
	s := &stream{cc: cc, req: req, headers: make(chan struct{}), window: iw, size: iw}
	if cc.cfg.WindowBudget != nil {
		s.cycle = time.Now()
	}
	s.cond.L = &cc.mu
	gz := addGzip(req)
	if err := ctx.Err(); err != nil {
		closeReqBody(req)
		return nil, err
	}
	// bodyLen is what the request says it sends: 0 none, -1 unknown.
	var bodyLen int64
	if req.Body != nil && req.Body != http.NoBody {
		bodyLen = req.ContentLength
		if bodyLen == 0 {
			bodyLen = -1
		}
	}

	var body *onceCloser
	if bodyLen != 0 {
		body = &onceCloser{ReadCloser: req.Body}
		s.body = body
	}
	cc.wmu.Lock()
	cc.mu.Lock()
	if cc.err != nil || cc.goAway || cc.closing || uint32(len(cc.streams)) >= cc.maxStreams {
		cc.mu.Unlock()
		cc.wmu.Unlock()
		return nil, ErrConnClosing
	}
	s.id = cc.nextID
	cc.nextID += 2
	if cc.nextID > maxStreamID {
		// The last stream ID a client may use (RFC 9113 5.1.1): the
		// connection takes no new stream and closes after its last one,
		// so the pool opens another. Writing a higher ID would fail the
		// whole connection, streams in flight included.
		cc.closing = true
	}
	cc.streams[s.id] = s
	s.sendWindow = cc.peerWindow
	maxFrame := cc.maxFrame
	var grant int
	if b := cc.cfg.WindowBudget; short && b != nil {
		if g := cc.cfg.ShortAnswerWindow - s.size; g > 0 && b.Take(int64(g)) {
			grant = g
			s.size += g
			s.window += g
			s.borrowed += g
		}
	}
	cc.mu.Unlock()
	err := cc.writeHeaders(s.id, req, gz, maxFrame, bodyLen, uint32(grant))
	cc.wmu.Unlock()
	if err != nil {
		var he HeaderError
		if errors.As(err, &he) {
			// Nothing was written.
			cc.forget(s)
			closeReqBody(req)
			return nil, err
		}
		// The connection failed while writing: what reached the server
		// is unknown.
		cc.fail(err)
		if body != nil {
			body.Close()
		}
		return nil, err
	}
	if bodyLen != 0 {
		// The body is written beside the wait for the answer (a server
		// may answer before it read it all). Writes are the rarer
		// requests: they get the goroutine the others are spared.
		go cc.writeBody(s, body)
	}

	select {
	case <-s.headers:
	case <-ctx.Done():
		// The answer may have come meanwhile: the stream ends either way,
		// and a body nobody will read gives its window back.
		cc.reset(s, http2.ErrCodeCancel, ctx.Err())
		cc.mu.Lock()
		res := s.res
		cc.mu.Unlock()
		if res != nil {
			res.Body.Close()
		}
		return nil, ctx.Err()
	}
	cc.mu.Lock()
	res, err := s.res, s.err
	if res != nil && !s.ended && s.err == nil {
		// The body streams: a cancelled request ends it.
		s.stop = context.AfterFunc(ctx, func() { cc.reset(s, http2.ErrCodeCancel, ctx.Err()) })
	}
	cc.mu.Unlock()
	if res == nil {
		return nil, err
	}
	if gz && res.Header.Get("Content-Encoding") == "gzip" {
		res.Header.Del("Content-Encoding")
		res.Header.Del("Content-Length")
		res.ContentLength = -1
		res.Uncompressed = true
		res.Body = &gzipBody{body: res.Body}
	}
	return res, nil
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// addGzip reports whether the request may ask for gzip on the caller's
// behalf and decompress the answer, as Go's transports do for a request
// that set no Accept-Encoding.
func addGzip(req *http.Request) bool {
	return req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == "" && req.Method != http.MethodHead
}

// HeaderError is a request header (or Host) that cannot be sent; nothing
// was written and the connection stays usable.
type HeaderError struct{ msg string }

func (e HeaderError) Error() string { return "fanout HTTP/2 client: " + e.msg }

// writeHeaders encodes and writes req's header block. Called with wmu
// held.
func (cc *Conn) writeHeaders(id uint32, req *http.Request, gz bool, maxFrame uint32, bodyLen int64, grant uint32) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(host) {
		return HeaderError{"invalid Host " + strconv.Quote(host)}
	}
	// Everything is checked before anything is encoded: the HPACK
	// encoder's table must not change for a request that is not sent.
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return HeaderError{"invalid header field name " + strconv.Quote(k)}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return HeaderError{"invalid value for header " + strconv.Quote(k)}
			}
		}
	}
	path := req.URL.RequestURI()
	cc.hbuf.Reset()
	cc.henc.WriteField(hpack.HeaderField{Name: ":authority", Value: host})
	cc.henc.WriteField(hpack.HeaderField{Name: ":method", Value: req.Method})
	cc.henc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	cc.henc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
	for k, vv := range req.Header {
		lk := lowerHeader(k)
		switch lk {
		case "host", "content-length", "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive":
			continue
		case "user-agent":
			// As x/net: one value, none if empty (ReverseProxy sets it
			// empty to send none).
			if len(vv) > 0 && vv[0] != "" {
				cc.henc.WriteField(hpack.HeaderField{Name: lk, Value: vv[0]})
			}
			continue
		case "te":
			// Only "trailers" may be sent over HTTP/2.
			if !containsTrailers(vv) {
				continue
			}
			cc.henc.WriteField(hpack.HeaderField{Name: "te", Value: "trailers"})
			continue
		}
		for _, v := range vv {
			cc.henc.WriteField(hpack.HeaderField{Name: lk, Value: v, Sensitive: lk == "authorization"})
		}
	}
	switch {
	case bodyLen > 0:
		cc.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(bodyLen, 10)})
	case bodyLen == 0 && (req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch):
		// As x/net: a write without a body says so.
		cc.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: "0"})
	}
	if gz {
		cc.henc.WriteField(hpack.HeaderField{Name: "accept-encoding", Value: "gzip"})
	}
	block := cc.hbuf.Bytes()
	first := true
	for len(block) > 0 || first {
		chunk := block
		if len(chunk) > int(maxFrame) {
			chunk = chunk[:maxFrame]
		}
		block = block[len(chunk):]
		var err error
		if first {
			err = cc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndStream: bodyLen == 0, EndHeaders: len(block) == 0})
			first = false
		} else {
			err = cc.fr.WriteContinuation(id, len(block) == 0, chunk)
		}
		if err != nil {
			return err
		}
	}
	if grant > 0 {
		// After the HEADERS that open the stream, in the same write.
		if err := cc.fr.WriteWindowUpdate(id, grant); err != nil {
			return err
		}
	}
	return cc.bw.Flush()
}

func containsTrailers(vv []string) bool {
	for _, v := range vv {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "trailers") {
				return true
			}
		}
	}
	return false
}

// lowerHeader lower-cases a canonical header name without allocating for
// the common ones.
func lowerHeader(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			if l, ok := commonLower[k]; ok {
				return l
			}
			return strings.ToLower(k)
		}
	}
	return k
}

var commonLower = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Authorization", "Content-Type", "User-Agent",
		"Audit-Id", "X-Request-Id", "If-None-Match", "Cache-Control", "Impersonate-User", "Impersonate-Group", "Te"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// forget drops a stream that was never written.
func (cc *Conn) forget(s *stream) {
	cc.mu.Lock()
	delete(cc.streams, s.id)
	cc.settleLocked(s)
	cc.becameIdleLocked()
	cc.mu.Unlock()
}

// reset ends s from fanout's side with an RST_STREAM, unless it ended.
func (cc *Conn) reset(s *stream, code http2.ErrCode, err error) {
	cc.mu.Lock()
	if cc.streams[s.id] != s {
		cc.mu.Unlock()
		return
	}
	cc.endStreamLocked(s, err)
	cc.mu.Unlock()
	cc.writeRST(s.id, code)
}

// endStreamLocked removes s with err (nil: ended normally, after its
// data).
func (cc *Conn) endStreamLocked(s *stream, err error) {
	if cc.streams[s.id] == s {
		delete(cc.streams, s.id)
	}
	if err != nil && s.err == nil {
		// Data already received stays readable before err, as with
		// x/net; Close gives back what is left unread.
		s.err = err
	}
	if s.res == nil {
		close(s.headers)
	}
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	cc.settleLocked(s)
	if s.body != nil {
		// A Read of the body may block: Close ends it (as x/net's
		// abortRequestBodyWrite).
		go s.body.Close()
		s.body = nil
	}
	s.cond.Broadcast()
	cc.sendCond.Broadcast()
	cc.becameIdleLocked()
}

func (cc *Conn) becameIdleLocked() {
	if len(cc.streams) == 0 {
		cc.idleSince = time.Now()
		if cc.closing || cc.goAway {
			go cc.fail(ErrConnClosing)
		}
	}
}

// fail closes the connection with err; streams still open get err, or,
// if the server cannot have seen them, an error wrapping
// ErrStreamGoneAway.
func (cc *Conn) fail(err error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	for _, s := range cc.streams {
		serr := err
		if cc.goAway && s.id > cc.lastStream {
			serr = cc.goneAwayLocked()
		} else if errors.Is(err, ErrConnClosing) {
			serr = errors.New("fanout HTTP/2 client: connection closed")
		}
		cc.endStreamLocked(s, serr)
	}
	cc.mu.Unlock()
	cc.timer.Stop()
	cc.conn.Close()
	if cc.cfg.OnClose != nil {
		cc.cfg.OnClose(cc)
	}
}

// goneAwayLocked is the error of a stream above the GOAWAY's last stream
// ID.
func (cc *Conn) goneAwayLocked() error {
	return fmt.Errorf("%w (GOAWAY %v, last stream %d)", ErrStreamGoneAway, cc.goAwayCode, cc.lastStream)
}

func (cc *Conn) readLoop() {
	for {
		f, err := cc.fr.ReadFrame()
		if err != nil {
			cc.mu.Lock()
			goAway, last, code := cc.goAway, cc.lastStream, cc.goAwayCode
			cc.mu.Unlock()
			if goAway {
				// The streams the GOAWAY named as received lose their
				// connection: they may have been processed.
				err = http2.GoAwayError{LastStreamID: last, ErrCode: code}
			} else if se, ok := err.(http2.StreamError); ok {
				// A malformed frame on one stream ends that stream only.
				cc.mu.Lock()
				if s := cc.streams[se.StreamID]; s != nil {
					cc.endStreamLocked(s, se)
				}
				cc.mu.Unlock()
				cc.writeRST(se.StreamID, se.Code)
				continue
			}
			cc.failConn(fmt.Errorf("fanout HTTP/2 client: reading from the server: %w", err))
			return
		}
		cc.reads.Add(1)
		if err := cc.handle(f); err != nil {
			cc.failConn(err)
			return
		}
	}
}

// failConn fails the connection with err, telling the server first with
// a GOAWAY if err is a connection error of the server's making (RFC 9113
// 5.4.1), so that it can tell what it did wrong.
func (cc *Conn) failConn(err error) {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		cc.wmu.Lock()
		if cc.fr.WriteGoAway(0, http2.ErrCode(ce), nil) == nil {
			cc.bw.Flush()
		}
		cc.wmu.Unlock()
	}
	cc.fail(err)
}

func (cc *Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return cc.onHeaders(f)
	case *http2.DataFrame:
		return cc.onData(f)
	case *http2.RSTStreamFrame:
		cc.mu.Lock()
		if s := cc.streams[f.StreamID]; s != nil {
			// A REFUSED_STREAM before the answer is what Unprocessed
			// recognises: the server did not process the request.
			cc.endStreamLocked(s, http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
		}
		cc.mu.Unlock()
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		cc.mu.Lock()
		err := f.ForeachSetting(func(st http2.Setting) error {
			// Out of range (a MAX_FRAME_SIZE below 16,384 would have the
			// writers loop on empty frames) is a connection error.
			if err := st.Valid(); err != nil {
				return err
			}
			switch st.ID {
			case http2.SettingMaxConcurrentStreams:
				cc.maxStreams = st.Val
			case http2.SettingMaxFrameSize:
				cc.maxFrame = st.Val
			case http2.SettingInitialWindowSize:
				delta := int(st.Val) - cc.peerWindow
				cc.peerWindow = int(st.Val)
				for _, s := range cc.streams {
					// A window may go below zero (6.9.2), not past
					// 2^31-1: that is a connection error.
					if s.sendWindow+delta > maxWindow {
						return http2.ConnectionError(http2.ErrCodeFlowControl)
					}
					s.sendWindow += delta
				}
				cc.sendCond.Broadcast()
			}
			return nil
		})
		cc.mu.Unlock()
		if err != nil {
			return err
		}
		return cc.write(func(fr *http2.Framer) error {
			if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
				cc.henc.SetMaxDynamicTableSizeLimit(v)
			}
			return fr.WriteSettingsAck()
		})
	case *http2.PingFrame:
		if f.IsAck() {
			cc.pinged.Store(false)
			return nil
		}
		return cc.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
	case *http2.GoAwayFrame:
		cc.mu.Lock()
		cc.goAway = true
		cc.lastStream = f.LastStreamID
		cc.goAwayCode = f.ErrCode
		for id, s := range cc.streams {
			if id > f.LastStreamID {
				cc.endStreamLocked(s, cc.goneAwayLocked())
			}
		}
		idle := len(cc.streams) == 0
		cc.mu.Unlock()
		if cc.cfg.OnGoAway != nil {
			cc.cfg.OnGoAway(cc)
		}
		if idle {
			return ErrConnClosing
		}
	case *http2.WindowUpdateFrame:
		// A window past 2^31-1 is a connection error on the connection,
		// a stream error on a stream (RFC 9113 6.9.1).
		cc.mu.Lock()
		if f.StreamID == 0 {
			if cc.sendWindow+int(f.Increment) > maxWindow {
				cc.mu.Unlock()
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			cc.sendWindow += int(f.Increment)
		} else if s := cc.streams[f.StreamID]; s != nil {
			if s.sendWindow+int(f.Increment) > maxWindow {
				cc.mu.Unlock()
				cc.reset(s, http2.ErrCodeFlowControl, http2.StreamError{StreamID: s.id, Code: http2.ErrCodeFlowControl,
					Cause: errors.New("fanout HTTP/2 client: the server's WINDOW_UPDATE took the stream's window past 2^31-1")})
				return nil
			}
			s.sendWindow += int(f.Increment)
		}
		cc.sendCond.Broadcast()
		cc.mu.Unlock()
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

// onHeaders takes a response's HEADERS, or its trailers.
func (cc *Conn) onHeaders(f *http2.MetaHeadersFrame) error {
	cc.mu.Lock()
	s := cc.streams[f.StreamID]
	if s == nil {
		cc.mu.Unlock()
		return nil
	}
	if f.Truncated {
		// The Framer stopped keeping fields past MaxHeaderListSize: an
		// answer missing some of its headers must not pass for whole.
		cc.mu.Unlock()
		return cc.streamError(s, fmt.Sprintf("header list larger than the %d bytes fanout accepts (SETTINGS_MAX_HEADER_LIST_SIZE)", maxHeaderListSize))
	}
	if s.res != nil {
		// Trailers: they must end the stream.
		if !f.StreamEnded() {
			cc.mu.Unlock()
			return cc.streamError(s, "trailers without END_STREAM")
		}
		s.trailer = make(http.Header)
		for _, hf := range f.RegularFields() {
			k := http.CanonicalHeaderKey(hf.Name)
			s.trailer[k] = append(s.trailer[k], hf.Value)
		}
		s.ended = true
		cc.endStreamLocked(s, nil)
		cc.mu.Unlock()
		return nil
	}
	status := f.PseudoValue("status")
	code, err := strconv.Atoi(status)
	if err != nil || code < 100 || code > 999 || len(status) != 3 {
		cc.mu.Unlock()
		return cc.streamError(s, "malformed :status "+strconv.Quote(status))
	}
	if code < 200 {
		// Informational (100 Continue, 103 Early Hints): the final
		// answer follows.
		cc.mu.Unlock()
		if f.StreamEnded() {
			return cc.streamError(s, "informational answer ended the stream")
		}
		return nil
	}
	fields := f.RegularFields()
	header := make(http.Header, len(fields))
	vals := make([]string, len(fields))
	var trailer http.Header
	for i, hf := range fields {
		k := http.CanonicalHeaderKey(hf.Name)
		vals[i] = hf.Value
		if vv, ok := header[k]; ok {
			header[k] = append(vv, hf.Value)
		} else {
			header[k] = vals[i : i+1 : i+1]
		}
		if k == "Trailer" {
			for _, t := range strings.Split(hf.Value, ",") {
				if t = strings.TrimSpace(t); t != "" {
					if trailer == nil {
						trailer = make(http.Header)
					}
					trailer[http.CanonicalHeaderKey(t)] = nil
				}
			}
		}
	}
	res := &http.Response{
		Status: statusLine(status, code), StatusCode: code,
		Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: header, Trailer: trailer, Request: s.req, ContentLength: -1, TLS: cc.tls,
	}
	if cl := header["Content-Length"]; len(cl) > 1 {
		// As net/http's Transport does over HTTP/1.1: equal values are
		// one, others make the answer malformed. Passed on, they would
		// reach an HTTP/1.1 client as two lines, framed by the first.
		first := textproto.TrimString(cl[0])
		for _, v := range cl[1:] {
			if textproto.TrimString(v) != first {
				cc.mu.Unlock()
				return cc.streamError(s, fmt.Sprintf("conflicting Content-Length values %q", cl))
			}
		}
		header["Content-Length"] = []string{first}
	}
	if cl := header["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseUint(cl[0], 10, 63); err == nil {
			res.ContentLength = int64(n)
		}
	}
	if f.StreamEnded() {
		if s.req.Method != http.MethodHead {
			res.ContentLength = 0
		}
		res.Body = http.NoBody
	} else {
		res.Body = &responseBody{s: s}
	}
	s.res, s.wantLen = res, res.ContentLength
	close(s.headers)
	if f.StreamEnded() {
		s.ended = true
		cc.endStreamLocked(s, nil)
	}
	cc.mu.Unlock()
	return nil
}

// streamError ends s with a PROTOCOL_ERROR of the server's making.
func (cc *Conn) streamError(s *stream, msg string) error {
	cc.reset(s, http2.ErrCodeProtocol, errors.New("fanout HTTP/2 client: protocol error from the server: "+msg))
	return nil
}

// onData takes a DATA frame: its bytes wait in the stream until its body
// is read, within the window fanout granted.
func (cc *Conn) onData(f *http2.DataFrame) error {
	n := int(f.Length)
	data := f.Data()
	cc.mu.Lock()
	s := cc.streams[f.StreamID]
	if s == nil || s.res == nil || n > s.window {
		// A stream fanout ended already: its bytes go straight back to
		// the connection window. DATA before HEADERS, or beyond the
		// window, ends the stream.
		cc.connUnacked += n
		inc := cc.takeConnUpdateLocked()
		cc.mu.Unlock()
		switch {
		case s != nil && s.res == nil:
			cc.streamError(s, "DATA before HEADERS")
		case s != nil:
			cc.reset(s, http2.ErrCodeFlowControl, errors.New("fanout HTTP/2 client: flow-control error from the server: DATA beyond the stream's window"))
		}
		return cc.writeWindowUpdates(0, 0, inc)
	}
	s.window -= n
	if s.window < s.size/4 {
		s.filled = true
	}
	// Padding is read by nobody: give it back at once.
	pad := n - len(data)
	s.unacked += pad
	cc.connUnacked += pad
	s.got += int64(len(data))
	if cl := s.wantLen; cl >= 0 && s.got > cl {
		cc.mu.Unlock()
		return cc.streamError(s, "more data than its Content-Length")
	}
	if len(data) > 0 {
		if s.off == len(s.buf) {
			s.buf, s.off = s.buf[:0], 0
		} else if s.off > cap(s.buf)/2 {
			s.buf = s.buf[:copy(s.buf, s.buf[s.off:])]
			s.off = 0
		}
		if need := len(s.buf) + len(data); need > cap(s.buf) {
			// Grow by doubling, but never past the stream window: flow
			// control keeps the data below it, so neither need the buffer.
			nb := make([]byte, len(s.buf), max(need, min(2*cap(s.buf), s.size)))
			copy(nb, s.buf)
			s.buf = nb
		}
		s.buf = append(s.buf, data...)
		s.cond.Signal()
	}
	if f.StreamEnded() {
		s.ended = true
		var err error
		if cl := s.wantLen; cl >= 0 && s.got < cl {
			err = io.ErrUnexpectedEOF
		}
		cc.endStreamLocked(s, err)
	}
	cc.mu.Unlock()
	return nil
}

// initialWindow is every stream's window at its start
// (SETTINGS_INITIAL_WINDOW_SIZE): the floor with a WindowBudget, the
// whole stream window without.
func (cc *Conn) initialWindow() int {
	if cc.cfg.WindowBudget != nil {
		return cc.cfg.MinReceiveBufferPerStream
	}
	return cc.cfg.MaxReceiveBufferPerStream
}

// resizeLocked is called as inc bytes read go back to s's window: it
// returns what to give back instead, the window grown with bytes of the
// WindowBudget or shrunk toward the floor. A stream grows (doubling, up
// to MaxReceiveBufferPerStream) when the server filled most of its
// window and the reader keeps up (it read all that came, or waited for
// data since the last time): the window, not the reader, is what slows
// it. It shrinks (by half of what it borrowed, at least the floor's
// worth) when half its window took more than slowCycle to come and be
// read, a watch between bursts: it needs less than that to keep its
// pace. It shrinks only with its buffer empty, so that the buffer stays
// within the window. A stream that streams keeps what it has: shrinking
// it on a quieter moment would have it grow again at once.
func (cc *Conn) resizeLocked(s *stream, inc int) int {
	b := cc.cfg.WindowBudget
	if b == nil {
		return inc
	}
	filled, waited, empty := s.filled, s.waited, s.off == len(s.buf)
	s.filled, s.waited = false, false
	now := time.Now()
	slow := now.Sub(s.cycle) > slowCycle
	s.cycle = now
	switch {
	case filled && (empty || waited) && !slow && s.size < cc.cfg.MaxReceiveBufferPerStream:
		d := min(s.size, cc.cfg.MaxReceiveBufferPerStream-s.size)
		if b.Take(int64(d)) {
			s.size += d
			s.borrowed += d
			inc += d
		}
	case slow && empty && s.borrowed > 0:
		d := min(s.borrowed, inc, max(s.borrowed/2, cc.cfg.MinReceiveBufferPerStream))
		b.Give(int64(d))
		s.size -= d
		s.borrowed -= d
		inc -= d
	}
	return inc
}

// slowCycle: a stream whose half window takes longer than this to come
// and be read gives back half of what it borrowed. It then still receives
// half its window per slowCycle: at 1 MiB, 512 KiB/s.
const slowCycle = time.Second

// settleLocked gives back to the WindowBudget what an ended stream
// borrowed and no longer holds: once it ended nothing more arrives, so
// only its unread data past the floor stays covered.
func (cc *Conn) settleLocked(s *stream) {
	if s.borrowed == 0 || cc.streams[s.id] == s {
		return
	}
	keep := min(s.borrowed, max(0, len(s.buf)-s.off-cc.cfg.MinReceiveBufferPerStream))
	cc.cfg.WindowBudget.Give(int64(s.borrowed - keep))
	s.borrowed = keep
}

// takeConnUpdateLocked returns the connection window to give back, once
// half of it has been read.
func (cc *Conn) takeConnUpdateLocked() uint32 {
	if cc.connUnacked < cc.cfg.MaxReceiveBufferPerConnection/2 {
		return 0
	}
	inc := cc.connUnacked
	cc.connUnacked = 0
	return uint32(inc)
}

// writeWindowUpdates gives back sInc bytes of stream id's window and
// cInc of the connection's; a failed write fails the connection.
func (cc *Conn) writeWindowUpdates(id, sInc, cInc uint32) error {
	if sInc == 0 && cInc == 0 {
		return nil
	}
	return cc.write(func(fr *http2.Framer) error {
		if cInc > 0 {
			if err := fr.WriteWindowUpdate(0, cInc); err != nil {
				return err
			}
		}
		if sInc == 0 {
			return nil
		}
		return fr.WriteWindowUpdate(id, sInc)
	})
}

// check runs on the connection's timer: a PING after ReadIdleTimeout of
// silence, the connection closed if the PING is not answered within
// PingTimeout, or once it carried no stream for IdleConnTimeout.
func (cc *Conn) check() {
	now := time.Now()
	next := cc.checkEvery()
	switch reads := cc.reads.Load(); {
	case cc.pinged.Load() && reads == cc.seen && now.Sub(cc.pingSent) >= cc.cfg.PingTimeout:
		cc.fail(fmt.Errorf("fanout HTTP/2 client: the server did not answer a PING within %v", cc.cfg.PingTimeout))
		return
	case cc.pinged.Load() && reads == cc.seen:
		next = cc.cfg.PingTimeout - now.Sub(cc.pingSent)
	case reads != cc.seen:
		// Frames arrived since the last check: silent from now on at most.
		cc.pinged.Store(false)
		cc.seen, cc.seenAt = reads, now
	case now.Sub(cc.seenAt) < cc.cfg.ReadIdleTimeout:
		// Silent, not yet for long enough to ask.
	default:
		if !cc.wmu.TryLock() {
			// A write is under way. One stuck for PingTimeout (the
			// server reads nothing) ends the connection, which
			// unblocks it.
			if cc.writeStuck.IsZero() {
				cc.writeStuck = now
			} else if now.Sub(cc.writeStuck) >= cc.cfg.PingTimeout {
				cc.fail(fmt.Errorf("fanout HTTP/2 client: a write to the server made no progress for %v", cc.cfg.PingTimeout))
				return
			}
			cc.timer.Reset(cc.cfg.PingTimeout / 10)
			return
		}
		cc.writeStuck = time.Time{}
		cc.pinged.Store(true)
		cc.pingSent = now
		err := cc.fr.WritePing(false, [8]byte{'f', 'a', 'n', 'o', 'u', 't'})
		if err == nil {
			err = cc.bw.Flush()
		}
		cc.wmu.Unlock()
		if err != nil {
			cc.fail(err)
			return
		}
		next = min(next, cc.cfg.PingTimeout)
	}
	cc.mu.Lock()
	idle := len(cc.streams) == 0 && now.Sub(cc.idleSince) >= cc.cfg.IdleConnTimeout
	failed := cc.err != nil
	cc.mu.Unlock()
	if failed {
		return
	}
	if idle {
		cc.fail(ErrConnClosing)
		return
	}
	cc.timer.Reset(next)
}

// statusLines are Response.Status for the codes net/http names.
var statusLines = func() (m [600]string) {
	for c := range m {
		if t := http.StatusText(c); t != "" {
			m[c] = strconv.Itoa(c) + " " + t
		}
	}
	return m
}()

func statusLine(status string, code int) string {
	if code < len(statusLines) && statusLines[code] != "" {
		return statusLines[code]
	}
	return status + " " + http.StatusText(code)
}

// writeRST resets stream id.
func (cc *Conn) writeRST(id uint32, code http2.ErrCode) {
	cc.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
}

// write runs w's frame writes under the write lock and flushes them; if
// either fails, the connection fails with the error.
func (cc *Conn) write(w func(*http2.Framer) error) error {
	cc.wmu.Lock()
	err := w(cc.fr)
	if err == nil {
		err = cc.bw.Flush()
	}
	cc.wmu.Unlock()
	if err != nil {
		cc.fail(err)
	}
	return err
}
