//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; fanout uses only its Framer, hpack and error types here, which net/http does not export.

package transport

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fanout's own HTTP/2 client: every request a pool sends to its
// apiserver goes through it (upgrades excepted: upgrade.go dials
// HTTP/1.1).
//
// Why: Go's HTTP/2 client runs a goroutine per request to write it and
// hands each answer over through several channels; measured in fanout at
// saturation that is most of the CPU per request fanout spends above
// HAProxy (docs/footprint.md, "fanout's own HTTP/2 client"). Here the
// caller's goroutine writes the request's HEADERS itself, under the
// connection's write lock, and the connection's one reading goroutine
// hands the answer over through one channel. A stream holds no goroutine
// while its body is read, so an open watch costs a stream struct and the
// data not yet read. A request body is written by a goroutine of its own
// (writes are the rarer requests), within the server's windows.
//
// What it keeps of x/net's behaviour: flow control with the windows of
// Config, PINGs after ReadIdleTimeout of silence, IdleConnTimeout, a new
// connection when the server's MAX_CONCURRENT_STREAMS is reached,
// transparent gzip when the request did not ask for an encoding, trailers,
// and errors that say whether the apiserver can have seen the request
// (UnprocessedError): a stream above a GOAWAY's last stream ID, a
// REFUSED_STREAM, or a connection that failed before the request was
// written. It never retries a request itself: the proxy's attempt policy
// does.

// maxHeaderListSize bounds a response's header block, as x/net's default.
const maxHeaderListSize = 10 << 20

// errConnClosing is the error of a stream that found its connection
// closing before the request was written; it is wrapped in
// UnprocessedError.
var errConnClosing = errors.New("fanout HTTP/2 client: connection closing before the request was sent")

// errStreamGoneAway is the error of a stream above a GOAWAY's last
// stream ID: the apiserver did not process it.
var errStreamGoneAway = errors.New("fanout HTTP/2 client: the apiserver's GOAWAY left this stream unprocessed")

// h2Conns is the set of connections of one generation (one endpoint, one
// client certificate).
type h2Conns struct {
	g *generation

	mu      sync.Mutex
	conns   []*h2Conn
	dialing *h2Dial // a dial in progress that requests wait on
}

type h2Dial struct {
	done chan struct{}
	cc   *h2Conn
	err  error
}

// roundTrip sends req on a connection that can take a stream, dialing
// one if none can.
func (cs *h2Conns) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for {
		cc, err := cs.get(ctx)
		if err != nil {
			closeReqBody(req)
			return nil, err
		}
		res, err := cc.roundTrip(req)
		if errors.Is(err, errConnClosing) {
			if ctx.Err() == nil {
				// Nothing was written: another connection may take it.
				continue
			}
			closeReqBody(req)
		}
		return res, err
	}
}

func (cs *h2Conns) get(ctx context.Context) (*h2Conn, error) {
	cs.mu.Lock()
	for _, cc := range cs.conns {
		if cc.canTakeStream() {
			cs.mu.Unlock()
			return cc, nil
		}
	}
	d := cs.dialing
	if d == nil {
		d = &h2Dial{done: make(chan struct{})}
		cs.dialing = d
		go cs.dial(d)
	}
	cs.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
		// The caller gave up, not the endpoint: the dial goes on for
		// the others.
		return nil, ctx.Err()
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.cc, nil
}

// dial opens a connection for every request that waits on d. It runs on
// its own goroutine, so that one request giving up does not fail the
// others.
func (cs *h2Conns) dial(d *h2Dial) {
	g := cs.g
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-g.p.t.done:
			cancel()
		case <-d.done:
		}
	}()
	nc, err := g.dialTLS(ctx)
	cancel()
	var cc *h2Conn
	if err == nil {
		cc, err = newH2Conn(cs, nc)
		if err != nil {
			nc.Close()
			err = &UnprocessedError{Endpoint: g.p.key.address, Err: err}
		}
	}
	cs.mu.Lock()
	cs.dialing = nil
	if cc != nil {
		cs.conns = append(cs.conns, cc)
	}
	cs.mu.Unlock()
	d.cc, d.err = cc, err
	close(d.done)
}

func (cs *h2Conns) remove(cc *h2Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, c := range cs.conns {
		if c == cc {
			cs.conns = append(cs.conns[:i], cs.conns[i+1:]...)
			return
		}
	}
}

// closeIdle closes the connections that carry no stream, and makes the
// others close when their last stream ends.
func (cs *h2Conns) closeIdle() {
	cs.mu.Lock()
	conns := append([]*h2Conn(nil), cs.conns...)
	cs.mu.Unlock()
	for _, cc := range conns {
		cc.closeWhenIdle()
	}
}

// h2Conn is one HTTP/2 connection to an apiserver.
type h2Conn struct {
	set  *h2Conns
	conn *trackedConn
	cfg  *Config
	tls  tls.ConnectionState // for Response.TLS

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
	streams     map[uint32]*h2Stream
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
	// what it saw last (seen) to tell a silent connection.
	reads    atomic.Uint64
	timer    *time.Timer // health and idle checks
	seen     uint64      // the timer's own
	pingSent time.Time   // the timer's own: an unanswered PING
	// writeStuck is the timer's own: when it first found a write holding
	// wmu with the connection silent.
	writeStuck time.Time
	pinged     atomic.Bool // a PING is out; the read loop clears it on the ACK
}

// h2Stream is one request's stream. Its fields are guarded by its
// connection's mu.
type h2Stream struct {
	cc  *h2Conn
	id  uint32
	req *http.Request

	res     *http.Response
	headers chan struct{} // closed when res is set or err is
	buf     []byte        // data received, not yet read
	off     int
	got     int64 // data bytes received, checked against Content-Length
	// sendWindow is what fanout may still send of the request body.
	sendWindow int
	// trailer holds the answer's trailers until the body's EOF, when
	// Read moves them to Response.Trailer (ReverseProxy reads that map
	// while the body streams).
	trailer http.Header
	unacked int  // bytes read, not yet given back to the stream's window
	window  int  // what the server may still send
	ended   bool // END_STREAM received
	err     error
	cond    sync.Cond // a body Read waits on it; L is the connection's mu
	stop    func() bool
	body    *onceCloser // the request body while writeBody sends it
}

type onceCloser struct {
	io.ReadCloser
	once sync.Once
}

func (c *onceCloser) Close() error {
	c.once.Do(func() { c.ReadCloser.Close() })
	return nil
}

func newH2Conn(set *h2Conns, nc *trackedConn) (*h2Conn, error) {
	cfg := &set.g.p.t.cfg
	cc := &h2Conn{
		set: set, conn: nc, cfg: cfg,
		nextID:     1,
		streams:    map[uint32]*h2Stream{},
		maxStreams: 100, // until the server's SETTINGS say
		maxFrame:   16 << 10,
		peerWindow: minReceiveBuffer,
		sendWindow: minReceiveBuffer,
	}
	cc.sendCond.L = &cc.mu
	cc.tls = nc.ConnectionState()
	cc.bw = bufio.NewWriterSize(nc, 4<<10)
	cc.fr = http2.NewFramer(cc.bw, bufio.NewReaderSize(nc, 4<<10))
	cc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cc.fr.MaxHeaderListSize = maxHeaderListSize
	cc.fr.SetMaxReadFrameSize(1 << 20)
	cc.henc = hpack.NewEncoder(&cc.hbuf)
	cc.idleSince = time.Now()

	nc.SetWriteDeadline(time.Now().Add(cfg.DialTimeout))
	cc.bw.WriteString(http2.ClientPreface)
	cc.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.MaxReceiveBufferPerStream)},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListSize},
	)
	// As x/net: the connection window grows by the whole configured
	// size, on top of the initial 65,535 bytes (Config caps it so the sum
	// fits).
	cc.fr.WriteWindowUpdate(0, uint32(cfg.MaxReceiveBufferPerConnection))
	err := cc.bw.Flush()
	nc.SetWriteDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("writing the HTTP/2 preface: %w", err)
	}
	cc.timer = time.AfterFunc(cc.checkEvery(), cc.check)
	go cc.readLoop()
	return cc, nil
}

func (cc *h2Conn) checkEvery() time.Duration {
	return min(cc.cfg.ReadIdleTimeout, cc.cfg.IdleConnTimeout)
}

func (cc *h2Conn) canTakeStream() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err == nil && !cc.goAway && !cc.closing && uint32(len(cc.streams)) < cc.maxStreams
}

func (cc *h2Conn) closeWhenIdle() {
	cc.mu.Lock()
	cc.closing = true
	idle := len(cc.streams) == 0
	cc.mu.Unlock()
	if idle {
		cc.fail(errConnClosing)
	}
}

// roundTrip writes req's HEADERS and waits for the answer's.
func (cc *h2Conn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	s := &h2Stream{cc: cc, req: req, headers: make(chan struct{}), window: cc.cfg.MaxReceiveBufferPerStream}
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
		return nil, errConnClosing
	}
	s.id = cc.nextID
	cc.nextID += 2
	cc.streams[s.id] = s
	s.sendWindow = cc.peerWindow
	maxFrame := cc.maxFrame
	cc.mu.Unlock()
	err := cc.writeHeaders(s.id, req, gz, maxFrame, bodyLen)
	cc.wmu.Unlock()
	if err != nil {
		var he headerError
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

// headerError is a request header that cannot be sent; nothing was
// written.
type headerError struct{ msg string }

func (e headerError) Error() string { return "fanout HTTP/2 client: " + e.msg }

// writeHeaders encodes and writes req's header block. Called with wmu
// held.
func (cc *h2Conn) writeHeaders(id uint32, req *http.Request, gz bool, maxFrame uint32, bodyLen int64) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(host) {
		return headerError{"invalid Host " + strconv.Quote(host)}
	}
	// Everything is checked before anything is encoded: the HPACK
	// encoder's table must not change for a request that is not sent.
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return headerError{"invalid header field name " + strconv.Quote(k)}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return headerError{"invalid value for header " + strconv.Quote(k)}
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
func (cc *h2Conn) forget(s *h2Stream) {
	cc.mu.Lock()
	delete(cc.streams, s.id)
	cc.becameIdleLocked()
	cc.mu.Unlock()
}

// reset ends s from fanout's side with an RST_STREAM, unless it ended.
func (cc *h2Conn) reset(s *h2Stream, code http2.ErrCode, err error) {
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
func (cc *h2Conn) endStreamLocked(s *h2Stream, err error) {
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

func (cc *h2Conn) becameIdleLocked() {
	if len(cc.streams) == 0 {
		cc.idleSince = time.Now()
		if cc.closing || cc.goAway {
			go cc.fail(errConnClosing)
		}
	}
}

// fail closes the connection with err; streams still open get err, or,
// if the server cannot have seen them, an UnprocessedError.
func (cc *h2Conn) fail(err error) {
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
		} else if errors.Is(err, errConnClosing) {
			serr = errors.New("fanout HTTP/2 client: connection closed")
		}
		cc.endStreamLocked(s, serr)
	}
	cc.mu.Unlock()
	cc.timer.Stop()
	cc.conn.Close()
	cc.set.remove(cc)
}

// goneAwayLocked is the error of a stream above the GOAWAY's last stream
// ID.
func (cc *h2Conn) goneAwayLocked() error {
	return &UnprocessedError{Endpoint: cc.set.g.p.key.address, Refused: true,
		Err: fmt.Errorf("%w (GOAWAY %v, last stream %d)", errStreamGoneAway, cc.goAwayCode, cc.lastStream)}
}

func (cc *h2Conn) readLoop() {
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
			cc.fail(fmt.Errorf("fanout HTTP/2 client: reading from kube-apiserver %s: %w", cc.set.g.p.key.address, err))
			return
		}
		cc.reads.Add(1)
		if err := cc.handle(f); err != nil {
			cc.fail(err)
			return
		}
	}
}

func (cc *h2Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return cc.onHeaders(f)
	case *http2.DataFrame:
		return cc.onData(f)
	case *http2.RSTStreamFrame:
		cc.mu.Lock()
		if s := cc.streams[f.StreamID]; s != nil {
			var err error = http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode}
			if f.ErrCode == http2.ErrCodeRefusedStream && s.res == nil {
				err = &UnprocessedError{Endpoint: cc.set.g.p.key.address, Err: err, Refused: true}
			}
			cc.endStreamLocked(s, err)
		}
		cc.mu.Unlock()
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		cc.mu.Lock()
		err := f.ForeachSetting(func(st http2.Setting) error {
			switch st.ID {
			case http2.SettingMaxConcurrentStreams:
				cc.maxStreams = st.Val
			case http2.SettingMaxFrameSize:
				cc.maxFrame = st.Val
			case http2.SettingInitialWindowSize:
				if st.Val > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				delta := int(st.Val) - cc.peerWindow
				cc.peerWindow = int(st.Val)
				for _, s := range cc.streams {
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
		cc.set.remove(cc)
		if idle {
			return errConnClosing
		}
	case *http2.WindowUpdateFrame:
		cc.mu.Lock()
		if f.StreamID == 0 {
			cc.sendWindow += int(f.Increment)
		} else if s := cc.streams[f.StreamID]; s != nil {
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
func (cc *h2Conn) onHeaders(f *http2.MetaHeadersFrame) error {
	cc.mu.Lock()
	s := cc.streams[f.StreamID]
	if s == nil {
		cc.mu.Unlock()
		return nil
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
		Header: header, Trailer: trailer, Request: s.req, ContentLength: -1, TLS: &cc.tls,
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
		res.Body = &h2Body{s: s}
	}
	s.res = res
	close(s.headers)
	if f.StreamEnded() {
		s.ended = true
		cc.endStreamLocked(s, nil)
	}
	cc.mu.Unlock()
	return nil
}

// streamError ends s with a PROTOCOL_ERROR of the server's making.
func (cc *h2Conn) streamError(s *h2Stream, msg string) error {
	cc.reset(s, http2.ErrCodeProtocol, fmt.Errorf("fanout HTTP/2 client: kube-apiserver %s: %s", cc.set.g.p.key.address, msg))
	return nil
}

// onData takes a DATA frame: its bytes wait in the stream until its body
// is read, within the window fanout granted.
func (cc *h2Conn) onData(f *http2.DataFrame) error {
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
		if s != nil {
			msg := "DATA before HEADERS"
			if s.res != nil {
				msg = "DATA beyond the flow-control window"
			}
			cc.streamError(s, msg)
		}
		return cc.writeWindowUpdates(0, 0, inc)
	}
	s.window -= n
	// Padding is read by nobody: give it back at once.
	pad := n - len(data)
	s.unacked += pad
	cc.connUnacked += pad
	s.got += int64(len(data))
	if cl := s.res.ContentLength; cl >= 0 && s.got > cl {
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
			nb := make([]byte, len(s.buf), max(need, min(2*cap(s.buf), cc.cfg.MaxReceiveBufferPerStream)))
			copy(nb, s.buf)
			s.buf = nb
		}
		s.buf = append(s.buf, data...)
		s.cond.Signal()
	}
	if f.StreamEnded() {
		s.ended = true
		var err error
		if cl := s.res.ContentLength; cl >= 0 && s.got < cl {
			err = io.ErrUnexpectedEOF
		}
		cc.endStreamLocked(s, err)
	}
	cc.mu.Unlock()
	return nil
}

// takeConnUpdateLocked returns the connection window to give back, once
// half of it has been read.
func (cc *h2Conn) takeConnUpdateLocked() uint32 {
	if cc.connUnacked < cc.cfg.MaxReceiveBufferPerConnection/2 {
		return 0
	}
	inc := cc.connUnacked
	cc.connUnacked = 0
	return uint32(inc)
}

// writeWindowUpdates gives back sInc bytes of stream id's window and
// cInc of the connection's; a failed write fails the connection.
func (cc *h2Conn) writeWindowUpdates(id, sInc, cInc uint32) error {
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
func (cc *h2Conn) check() {
	now := time.Now()
	next := cc.checkEvery()
	switch reads := cc.reads.Load(); {
	case cc.pinged.Load() && reads == cc.seen && now.Sub(cc.pingSent) >= cc.cfg.PingTimeout:
		cc.fail(fmt.Errorf("fanout HTTP/2 client: kube-apiserver %s did not answer a PING within %v", cc.set.g.p.key.address, cc.cfg.PingTimeout))
		return
	case cc.pinged.Load() && reads == cc.seen:
		next = cc.cfg.PingTimeout - now.Sub(cc.pingSent)
	case reads == cc.seen:
		if !cc.wmu.TryLock() {
			// A write is under way. One stuck for PingTimeout (the
			// apiserver reads nothing) ends the connection, which
			// unblocks it.
			if cc.writeStuck.IsZero() {
				cc.writeStuck = now
			} else if now.Sub(cc.writeStuck) >= cc.cfg.PingTimeout {
				cc.fail(fmt.Errorf("fanout HTTP/2 client: a write to kube-apiserver %s made no progress for %v", cc.set.g.p.key.address, cc.cfg.PingTimeout))
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
	default:
		cc.pinged.Store(false)
	}
	cc.seen = cc.reads.Load()
	cc.mu.Lock()
	idle := len(cc.streams) == 0 && now.Sub(cc.idleSince) >= cc.cfg.IdleConnTimeout
	failed := cc.err != nil
	cc.mu.Unlock()
	if failed {
		return
	}
	if idle {
		cc.fail(errConnClosing)
		return
	}
	cc.timer.Reset(next)
}

// errBodyClosed is what a Read after Close returns.
var errBodyClosed = errors.New("fanout HTTP/2 client: response body closed")

// h2Body is a response body: it reads the data the stream holds and
// gives the window back as it goes.
type h2Body struct {
	s      *h2Stream
	closed bool // guarded by the connection's mu
}

func (b *h2Body) Read(p []byte) (int, error) {
	s := b.s
	cc := s.cc
	cc.mu.Lock()
	for s.off == len(s.buf) && !s.ended && s.err == nil && !b.closed {
		s.cond.Wait()
	}
	if b.closed {
		cc.mu.Unlock()
		return 0, errBodyClosed
	}
	if s.off == len(s.buf) {
		err := s.err
		if err == nil {
			err = io.EOF
			if s.trailer != nil {
				if s.res.Trailer == nil {
					s.res.Trailer = make(http.Header, len(s.trailer))
				}
				for k, vv := range s.trailer {
					s.res.Trailer[k] = vv
				}
				s.trailer = nil
			}
		}
		cc.mu.Unlock()
		return 0, err
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	if s.off == len(s.buf) {
		s.off = 0
		if cap(s.buf) > 64<<10 {
			s.buf = nil // a burst is over; do not keep its buffer
		} else {
			s.buf = s.buf[:0]
		}
	}
	var sInc uint32
	if !s.ended && s.err == nil {
		s.unacked += n
		if s.unacked >= cc.cfg.MaxReceiveBufferPerStream/2 {
			sInc = uint32(s.unacked)
			s.window += s.unacked
			s.unacked = 0
		}
	}
	cc.connUnacked += n
	cInc := cc.takeConnUpdateLocked()
	cc.mu.Unlock()
	cc.writeWindowUpdates(s.id, sInc, cInc)
	return n, nil
}

func (b *h2Body) Close() error {
	s := b.s
	cc := s.cc
	cc.mu.Lock()
	if b.closed {
		cc.mu.Unlock()
		return nil
	}
	b.closed = true
	open := cc.streams[s.id] == s
	if !open {
		// Ended: what was not read goes back to the connection window.
		cc.connUnacked += len(s.buf) - s.off
		s.buf, s.off = nil, 0
		inc := cc.takeConnUpdateLocked()
		s.cond.Broadcast()
		cc.mu.Unlock()
		cc.writeWindowUpdates(0, 0, inc)
		return nil
	}
	cc.mu.Unlock()
	cc.reset(s, http2.ErrCodeCancel, errBodyClosed)
	// The stream is gone from the connection, so data arriving from now
	// on goes back to the connection window as it comes; what it holds
	// goes back now.
	cc.mu.Lock()
	cc.connUnacked += len(s.buf) - s.off
	s.buf, s.off = nil, 0
	inc := cc.takeConnUpdateLocked()
	cc.mu.Unlock()
	cc.writeWindowUpdates(0, 0, inc)
	return nil
}

// gzipBody decompresses a body fanout asked gzip for on the client's
// behalf.
type gzipBody struct {
	body io.ReadCloser
	zr   *gzip.Reader
	err  error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.body)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		g.err = err
	}
	return n, err
}

func (g *gzipBody) Close() error { return g.body.Close() }

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

// bodyBufs are the chunks request bodies are read into.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// writeBody sends a request body in DATA frames as the server's windows
// allow, and ends the stream after it. It stops when the stream ends
// first (an answer, a reset, the connection lost) and resets the stream
// if the body cannot be read.
func (cc *h2Conn) writeBody(s *h2Stream, body *onceCloser) {
	defer func() {
		// Done with it: the stream's end need not close it for us.
		cc.mu.Lock()
		if s.body == body {
			s.body = nil
		}
		cc.mu.Unlock()
		body.Close()
	}()
	bp := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		data := buf[:n]
		eof := rerr == io.EOF
		if rerr != nil && !eof {
			cc.reset(s, http2.ErrCodeCancel, fmt.Errorf("reading the request body: %w", rerr))
			return
		}
		for first := true; len(data) > 0 || (eof && first); first = false {
			cc.mu.Lock()
			for len(data) > 0 && (s.sendWindow <= 0 || cc.sendWindow <= 0) && cc.streams[s.id] == s && cc.err == nil {
				cc.sendCond.Wait()
			}
			if cc.streams[s.id] != s || cc.err != nil {
				// The stream ended from the server's side (or was reset):
				// nothing more is wanted.
				answered := s.res != nil && s.ended && s.err == nil
				cc.mu.Unlock()
				if answered {
					// The server answered in full before the body
					// ended: tell it that the rest will not come.
					cc.writeRST(s.id, http2.ErrCodeCancel)
				}
				return
			}
			k := 0
			if len(data) > 0 {
				k = min(len(data), s.sendWindow, cc.sendWindow, int(cc.maxFrame))
			}
			s.sendWindow -= k
			cc.sendWindow -= k
			cc.mu.Unlock()
			end := eof && k == len(data)
			if err := cc.write(func(fr *http2.Framer) error { return fr.WriteData(s.id, end, data[:k]) }); err != nil {
				return
			}
			data = data[k:]
			if end {
				return
			}
		}
	}
}

// writeRST resets stream id.
func (cc *h2Conn) writeRST(id uint32, code http2.ErrCode) {
	cc.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
}

// write runs w's frame writes under the write lock and flushes them; if
// either fails, the connection fails with the error.
func (cc *h2Conn) write(w func(*http2.Framer) error) error {
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
