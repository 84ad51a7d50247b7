//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package; the test peer uses its Framer and hpack.

package h2conn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
)

// Tests of the connection against the test peer of peer_test.go: the
// semantics of x/net's own transport tests that apply to fanout, each
// frame the client writes asserted. The tests over real TLS in
// conn_test.go and body_test.go cover much of the same ground end to
// end; where x/net's Transport and this client differ, docs/security.md
// says why.

func setting(id http2.SettingID, v uint32) http2.Setting { return http2.Setting{ID: id, Val: v} }

// dataOf reads the frames the client wrote, summing the DATA on stream
// id and counting the SETTINGS ACKs, in whatever order they come; any
// other frame fails the test.
func dataOf(t *testing.T, p *testPeer, id uint32) (n int, ended bool, acks int) {
	t.Helper()
	for f := p.readFrame(); f != nil; f = p.readFrame() {
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID != id {
				t.Fatalf("DATA on stream %d, want only stream %d's", f.StreamID, id)
			}
			n += len(f.Data())
			ended = ended || f.StreamEnded()
		case *http2.SettingsFrame:
			if f.IsAck() {
				acks++
				continue
			}
			t.Fatalf("unexpected %s", summarize(f))
		default:
			t.Fatalf("unexpected %s", summarize(f))
		}
	}
	return n, ended, acks
}

// TestPeerMaxConcurrentStreamsLowered: the client opens no stream beyond
// the server's SETTINGS_MAX_CONCURRENT_STREAMS, writing nothing for the
// request it refuses (ErrConnClosing); when the server lowers the limit
// below the streams open, those go on and none opens until they are
// below the new limit.
func TestPeerMaxConcurrentStreamsLowered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingMaxConcurrentStreams, 2))
		rt1 := p.get(t.Context(), "/1")
		h := p.wantHeaders(1, true, 0)
		if got := fmt.Sprint(h[":method"], h[":path"], h[":scheme"], h[":authority"]); got != "[GET] [/1] [https] [kubernetes]" {
			t.Errorf("pseudo-headers %s", got)
		}
		rt3 := p.get(t.Context(), "/3")
		p.wantHeaders(3, true, 0)
		if p.cc.CanTakeStream() {
			t.Error("CanTakeStream with 2 streams open and a limit of 2")
		}
		if _, err := p.get(t.Context(), "/x").result(); !errors.Is(err, ErrConnClosing) {
			t.Errorf("a third request: %v, want ErrConnClosing", err)
		}
		p.wantIdle()

		p.writeSettings(setting(http2.SettingMaxConcurrentStreams, 1))
		p.wantSettingsAck()
		p.writeHeaders(1, false, ":status", "200")
		p.writeData(1, true, "one")
		rt1.wantBody("one")
		if p.cc.CanTakeStream() {
			t.Error("CanTakeStream with 1 stream open and the limit lowered to 1")
		}
		p.writeHeaders(3, false, ":status", "200")
		p.writeData(3, true, "three")
		rt3.wantBody("three")
		if !p.cc.CanTakeStream() {
			t.Error("CanTakeStream false with no stream open")
		}
		rt5 := p.get(t.Context(), "/5")
		p.wantHeaders(5, true, 0)
		p.writeHeaders(5, true, ":status", "204")
		if code := rt5.response().StatusCode; code != 204 {
			t.Errorf("status %d", code)
		}
	})
}

// TestPeerInitialWindowSizeChanges: a change of
// SETTINGS_INITIAL_WINDOW_SIZE applies to the open stream's send window
// by the difference (RFC 9113 6.9.2), down below zero too: the client
// then sends nothing until WINDOW_UPDATEs bring the window above zero.
func TestPeerInitialWindowSizeChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const body = "0123456789abcdefghijklmnopqrstuvwxyzABCD" // 40 bytes
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingInitialWindowSize, 10))
		rt := p.post(t.Context(), "/upload", body)
		h := p.wantHeaders(1, false, 0)
		if cl := h["content-length"]; len(cl) != 1 || cl[0] != "40" {
			t.Errorf("content-length %q, want 40", cl)
		}
		p.wantData(1, 10, false, 0)
		p.wantIdle()

		step := func(what string, wantData int, wantEnd bool, wantAcks int) {
			t.Helper()
			n, ended, acks := dataOf(t, p, 1)
			if n != wantData || ended != wantEnd || acks != wantAcks {
				t.Fatalf("after %s: %d bytes of DATA (END_STREAM %v) and %d SETTINGS ACKs, want %d (%v) and %d",
					what, n, ended, acks, wantData, wantEnd, wantAcks)
			}
		}
		p.writeSettings(setting(http2.SettingInitialWindowSize, 15)) // window 0 → 5
		step("INITIAL_WINDOW_SIZE 10 → 15", 5, false, 1)
		p.writeSettings(setting(http2.SettingInitialWindowSize, 5)) // window 0 → -10
		step("INITIAL_WINDOW_SIZE 15 → 5", 0, false, 1)
		p.fr.WriteWindowUpdate(1, 10) // -10 → 0
		step("WINDOW_UPDATE 10 on a window of -10", 0, false, 0)
		p.fr.WriteWindowUpdate(1, 7) // 0 → 7
		step("WINDOW_UPDATE 7", 7, false, 0)
		p.writeSettings(setting(http2.SettingInitialWindowSize, 30)) // 0 → 25, 18 bytes left
		step("INITIAL_WINDOW_SIZE 5 → 30", 18, true, 1)
		p.writeHeaders(1, true, ":status", "201")
		if code := rt.response().StatusCode; code != 201 {
			t.Errorf("status %d", code)
		}
	})
}

// TestPeerMaxFrameSize: with the server's MAX_FRAME_SIZE at 16,384 (the
// minimum) a 40 KiB header block goes out as HEADERS and CONTINUATIONs
// and a 100,000-byte body as DATA frames, none larger; a MAX_FRAME_SIZE
// out of range (0 had the header writer loop on empty frames) is a
// connection error.
func TestPeerMaxFrameSize(t *testing.T) {
	inBubble(t, "within", func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingMaxFrameSize, 16384), setting(http2.SettingInitialWindowSize, 1<<20))
		p.fr.WriteWindowUpdate(0, 1<<20)
		big := fmt.Sprintf("%x", pattern(3, 20<<10))
		body := string(pattern(4, 100000))
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "https://kubernetes/big", strings.NewReader(body))
		req.Header.Set("X-Big", big)
		rt := p.roundTrip(req)
		h := p.wantHeaders(1, false, 16384)
		if got := h["x-big"]; len(got) != 1 || got[0] != big {
			t.Errorf("x-big arrived as %d values, not the value sent", len(got))
		}
		if got := p.wantData(1, len(body), true, 16384); string(got) != body {
			t.Error("the body arrived changed")
		}
		p.writeHeaders(1, true, ":status", "200")
		rt.response()
	})
	for _, v := range []uint32{0, 16383, 1 << 24} {
		inBubble(t, fmt.Sprintf("out of range %d", v), func(t *testing.T) {
			p := newTestPeer(t, Config{})
			p.greet()
			p.writeSettings(setting(http2.SettingMaxFrameSize, v))
			p.wantGoAway(0, http2.ErrCodeProtocol)
			p.wantClosed()
			if _, err := p.get(t.Context(), "/").result(); !errors.Is(err, ErrConnClosing) {
				t.Errorf("a request after: %v, want ErrConnClosing", err)
			}
		})
	}
}

// TestPeerHeaderTableSize: a server's SETTINGS_HEADER_TABLE_SIZE of 0
// makes the client's next header block start with a dynamic table size
// update to 0 (RFC 7541 4.2, 6.3) and index nothing after it.
func TestPeerHeaderTableSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingHeaderTableSize, 0))
		p.dec.SetAllowedMaxDynamicTableSize(0)
		for i, id := range []uint32{1, 3} {
			rt := p.get(t.Context(), "/same")
			h, block := p.wantHeaderBlock(id, true, 0)
			if i == 0 && (len(block) == 0 || block[0] != 0x20) {
				t.Errorf("the first header block after HEADER_TABLE_SIZE 0 starts %#x, want 0x20 (table size update to 0)", block[:1])
			}
			if got := h[":path"]; len(got) != 1 || got[0] != "/same" {
				t.Errorf("request %d: :path %q", i, got)
			}
			p.writeHeaders(id, true, ":status", "200")
			rt.response()
		}
	})
}

// TestPeerConnectionWindow: a request body never goes beyond the
// connection's send window, whatever the stream's: 65,535 bytes, then
// exactly what WINDOW_UPDATEs on stream 0 grant.
func TestPeerConnectionWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingInitialWindowSize, 1<<20))
		rt := p.post(t.Context(), "/upload", string(pattern(5, 100000)))
		p.wantHeaders(1, false, 0)
		p.wantData(1, InitialWindow, false, 16384)
		p.wantIdle()
		p.fr.WriteWindowUpdate(0, 1000)
		p.wantData(1, 1000, false, 0)
		p.wantIdle()
		p.fr.WriteWindowUpdate(1, 50000) // the stream's window is not what binds
		p.wantIdle()
		p.fr.WriteWindowUpdate(0, 1<<20)
		p.wantData(1, 100000-InitialWindow-1000, true, 16384)
		p.writeHeaders(1, true, ":status", "200")
		rt.response()
	})
}

// TestPeerWindowOverflow: a WINDOW_UPDATE that takes the connection's
// send window past 2^31-1 is a connection error FLOW_CONTROL_ERROR
// (GOAWAY, closed), one that takes a stream's past it a stream error
// (RST_STREAM FLOW_CONTROL_ERROR, the connection goes on), and an
// INITIAL_WINDOW_SIZE that takes an open stream's past it a connection
// error (RFC 9113 6.9.1, 6.9.2). Exactly 2^31-1 is allowed.
func TestPeerWindowOverflow(t *testing.T) {
	const toMax = maxWindow - InitialWindow
	inBubble(t, "connection", func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet()
		p.fr.WriteWindowUpdate(0, toMax)
		p.wantIdle()
		p.fr.WriteWindowUpdate(0, 1)
		p.wantGoAway(0, http2.ErrCodeFlowControl)
		p.wantClosed()
	})
	inBubble(t, "stream", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.fr.WriteWindowUpdate(1, toMax)
		p.wantIdle()
		p.fr.WriteWindowUpdate(1, 1)
		p.wantRSTStream(1, http2.ErrCodeFlowControl)
		_, err := rt.result()
		var se http2.StreamError
		if !errors.As(err, &se) || se.Code != http2.ErrCodeFlowControl || Unprocessed(err) {
			t.Errorf("RoundTrip: %v, want a FLOW_CONTROL_ERROR stream error, not Unprocessed", err)
		}
		p.wantAnswered(3, "/")
	})
	inBubble(t, "INITIAL_WINDOW_SIZE", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.fr.WriteWindowUpdate(1, toMax)
		p.writeSettings(setting(http2.SettingInitialWindowSize, InitialWindow+1))
		p.wantGoAway(0, http2.ErrCodeFlowControl)
		p.wantClosed()
		if _, err := rt.result(); err == nil {
			t.Error("RoundTrip succeeded on a connection failed by a flow-control error")
		}
	})
}

// TestPeerSlowReader: a stream whose body nobody reads holds at most its
// window (32 KiB here) and gets no WINDOW_UPDATE until it is read; a
// stream beside it flows on, its window given back as it is read; DATA
// beyond an unread stream's window resets that stream with
// FLOW_CONTROL_ERROR, and what it held stays readable before the error.
func TestPeerSlowReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 32 << 10
		p := newTestPeer(t, Config{MaxReceiveBufferPerStream: window, MaxReceiveBufferPerConnection: 1 << 20})
		p.greet()
		slow := p.get(t.Context(), "/slow")
		p.wantHeaders(1, true, 0)
		fast := p.get(t.Context(), "/fast")
		p.wantHeaders(3, true, 0)
		p.writeHeaders(1, false, ":status", "200")
		p.writeHeaders(3, false, ":status", "200")
		chunk := string(pattern(6, 16<<10))
		p.writeData(1, false, chunk)
		p.writeData(1, false, chunk)
		p.wantIdle() // nothing read: no window given back
		s := slow.response().Body.(*responseBody).s
		held := func() int {
			synctest.Wait()
			p.cc.mu.Lock()
			defer p.cc.mu.Unlock()
			return len(s.buf) - s.off
		}
		if n := held(); n != window {
			t.Errorf("the unread stream holds %d bytes, want its window, %d", n, window)
		}

		fastBody := fast.response().Body
		buf := make([]byte, 16<<10)
		for i := range 4 {
			p.writeData(3, false, chunk)
			if _, err := io.ReadFull(fastBody, buf); err != nil {
				t.Fatalf("fast stream, chunk %d: %v", i, err)
			}
			p.wantWindowUpdate(3, 16<<10)
			p.wantIdle()
		}

		slowBody := slow.response().Body
		if _, err := io.ReadFull(slowBody, buf[:16<<10-1]); err != nil {
			t.Fatal(err)
		}
		p.wantIdle() // below half the window: not given back yet
		if _, err := io.ReadFull(slowBody, buf[:1]); err != nil {
			t.Fatal(err)
		}
		p.wantWindowUpdate(1, 16<<10)
		p.writeData(1, false, chunk) // fits the window given back
		p.wantIdle()
		if n := held(); n != window {
			t.Errorf("the slow stream holds %d bytes, want %d", n, window)
		}
		p.writeData(1, false, "x") // beyond it
		p.wantRSTStream(1, http2.ErrCodeFlowControl)
		n, err := io.Copy(io.Discard, slowBody)
		if n != window || err == nil || !strings.Contains(err.Error(), "flow-control") {
			t.Errorf("the reset stream read %d bytes and %v, want the %d it held, then a flow-control error", n, err, window)
		}
		p.writeData(3, true, "end")
		if b, err := io.ReadAll(fastBody); err != nil || string(b) != "end" {
			t.Errorf("fast stream after the reset: %q, %v", b, err)
		}
	})
}

// TestPeerGoAway: after a GOAWAY naming stream 3 as the last, stream 5
// fails as Unprocessed (ErrStreamGoneAway), streams 1 and 3 are answered,
// no new stream opens (nothing is written for a new request), and the
// connection closes after its last stream; so with NO_ERROR and with an
// error code. Lost after the GOAWAY, streams 1 and 3 fail with an error
// that is not Unprocessed (the server may have processed them).
func TestPeerGoAway(t *testing.T) {
	for _, code := range []http2.ErrCode{http2.ErrCodeNo, http2.ErrCodeEnhanceYourCalm} {
		inBubble(t, code.String(), func(t *testing.T) {
			p := newTestPeer(t, Config{})
			p.greet()
			var rts []*peerRT
			for _, id := range []uint32{1, 3, 5} {
				rts = append(rts, p.get(t.Context(), "/"))
				p.wantHeaders(id, true, 0)
			}
			p.fr.WriteGoAway(3, code, []byte("bye"))
			synctest.Wait()
			if _, err := rts[2].result(); !Unprocessed(err) || !errors.Is(err, ErrStreamGoneAway) {
				t.Errorf("stream 5: %v, want ErrStreamGoneAway (Unprocessed)", err)
			}
			if n := p.goAways.Load(); n != 1 {
				t.Errorf("OnGoAway called %d times, want 1", n)
			}
			if p.cc.CanTakeStream() {
				t.Error("CanTakeStream after a GOAWAY")
			}
			if _, err := p.get(t.Context(), "/").result(); !errors.Is(err, ErrConnClosing) {
				t.Errorf("a request after the GOAWAY: %v, want ErrConnClosing", err)
			}
			p.wantIdle()
			for i, id := range []uint32{1, 3} {
				p.writeHeaders(id, false, ":status", "200")
				p.writeData(id, true, "answered")
				rts[i].wantBody("answered")
			}
			<-p.closed
			if fs := p.wantClosed(); len(fs) != 0 {
				t.Errorf("the client wrote %s after the GOAWAY's streams ended, want nothing", fs)
			}
		})
	}
	inBubble(t, "lost after", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.fr.WriteGoAway(1, http2.ErrCodeNo, nil)
		p.s2c.close()
		_, err := rt.result()
		var ga http2.GoAwayError
		if !errors.As(err, &ga) || Unprocessed(err) {
			t.Errorf("stream 1: %v, want an http2.GoAwayError, not Unprocessed", err)
		}
	})
}

// TestPeerRSTStream: a stream the server resets fails with its code;
// REFUSED_STREAM alone is Unprocessed (RFC 9113 8.7: not processed). The
// client writes nothing back, the stream's slot is free at once (the
// server allows one stream), and the connection takes the next request.
func TestPeerRSTStream(t *testing.T) {
	for _, tc := range []struct {
		code        http2.ErrCode
		unprocessed bool
	}{
		{http2.ErrCodeRefusedStream, true},
		{http2.ErrCodeCancel, false},
		{http2.ErrCodeInternal, false},
		{http2.ErrCodeProtocol, false},
		{http2.ErrCodeNo, false},
	} {
		inBubble(t, tc.code.String(), func(t *testing.T) {
			p := newTestPeer(t, Config{})
			p.greet(setting(http2.SettingMaxConcurrentStreams, 1))
			rt := p.get(t.Context(), "/")
			p.wantHeaders(1, true, 0)
			p.fr.WriteRSTStream(1, tc.code)
			_, err := rt.result()
			var se http2.StreamError
			if !errors.As(err, &se) || se.Code != tc.code {
				t.Fatalf("RoundTrip: %v, want a stream error %v", err, tc.code)
			}
			if got := Unprocessed(err); got != tc.unprocessed {
				t.Errorf("Unprocessed(%v) = %v, want %v", err, got, tc.unprocessed)
			}
			p.wantIdle()
			if !p.cc.CanTakeStream() {
				t.Error("CanTakeStream false after the only stream was reset")
			}
			p.wantAnswered(3, "/")
		})
	}
}

// TestPeerPing: a server's PING is answered with its data; a connection
// that falls silent gets a PING after ReadIdleTimeout, and is closed if
// it goes unanswered, between ReadIdleTimeout + PingTimeout and 1.2 ×
// ReadIdleTimeout + PingTimeout after its last frame whatever the phase
// of the client's timer (eight phases, an eighth of ReadIdleTimeout
// apart); answered PINGs keep it.
func TestPeerPing(t *testing.T) {
	const readIdle, pingTimeout = 5 * time.Second, 3 * time.Second
	cfg := Config{ReadIdleTimeout: readIdle, PingTimeout: pingTimeout}
	inBubble(t, "answered", func(t *testing.T) {
		p := newTestPeer(t, cfg)
		p.greet()
		p.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
		if d := p.wantPing(true); d != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
			t.Errorf("PING ACK data %v, want the PING's", d)
		}
	})
	for k := range 8 {
		phase := readIdle * time.Duration(k) / 8
		inBubble(t, fmt.Sprintf("silent at phase %v", phase), func(t *testing.T) {
			p := newTestPeer(t, cfg)
			p.greet()
			rt := p.get(t.Context(), "/watch")
			p.wantHeaders(1, true, 0)
			p.writeHeaders(1, false, ":status", "200")
			body := rt.response().Body
			time.Sleep(phase)              // less than ReadIdleTimeout: no PING yet
			p.writeData(1, false, "event") // the last frame
			last := time.Now()
			p.wantIdle()
			<-p.closed
			silence := p.closedAt.Sub(last)
			t.Logf("closed %v after its last frame", silence)
			if silence < readIdle+pingTimeout || silence > readIdle*6/5+pingTimeout {
				t.Errorf("closed %v after its last frame, want between %v and %v", silence, readIdle+pingTimeout, readIdle*6/5+pingTimeout)
			}
			p.wantPing(false)
			p.wantClosed()
			if b, err := io.ReadAll(body); string(b) != "event" || err == nil {
				t.Errorf("the watch read %q, %v; want its event, then an error", b, err)
			}
		})
	}
	inBubble(t, "silent but answering", func(t *testing.T) {
		p := newTestPeer(t, cfg)
		p.greet()
		for i := range 3 {
			start := time.Now()
			for p.readFrameOrNil() == nil {
				time.Sleep(readIdle / 50)
			}
			// (readFrameOrNil consumed the PING: answer it as any.)
			if waited := time.Since(start); waited < readIdle {
				t.Errorf("PING %d after %v of silence, want at least ReadIdleTimeout", i, waited)
			}
			p.fr.WritePing(true, [8]byte{'f', 'a', 'n', 'o', 'u', 't'})
			synctest.Wait()
			select {
			case <-p.closed:
				t.Fatalf("closed after PING %d was answered", i)
			default:
			}
		}
	})
}

// readFrameOrNil returns a frame if the client wrote one, which must be
// a PING.
func (p *testPeer) readFrameOrNil() http2.Frame {
	p.t.Helper()
	f := p.readFrame()
	if f != nil {
		if pf, ok := f.(*http2.PingFrame); !ok || pf.IsAck() {
			p.t.Fatalf("got %s, want a PING", summarize(f))
		}
	}
	return f
}

// TestPeerStreamIDExhaustion: the client's last stream is 2^31-1 (RFC
// 9113 5.1.1); after it the connection takes no new stream (CanTakeStream
// false, a RoundTrip gets ErrConnClosing with nothing written) while the
// streams open are answered, and it closes after them, so that a pool
// opens another. Writing a higher ID would fail every stream on it.
func TestPeerStreamIDExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet()
		p.cc.wmu.Lock()
		p.cc.nextID = maxStreamID - 2 // as after a billion requests
		p.cc.wmu.Unlock()
		a := p.get(t.Context(), "/a")
		p.wantHeaders(maxStreamID-2, true, 0)
		if !p.cc.CanTakeStream() {
			t.Error("CanTakeStream false with one stream ID left")
		}
		b := p.get(t.Context(), "/b")
		p.wantHeaders(maxStreamID, true, 0)
		if p.cc.CanTakeStream() {
			t.Error("CanTakeStream true with no stream ID left")
		}
		if _, err := p.get(t.Context(), "/c").result(); !errors.Is(err, ErrConnClosing) {
			t.Errorf("a request past the last stream ID: %v, want ErrConnClosing", err)
		}
		p.wantIdle()
		for i, rt := range []*peerRT{a, b} {
			id := uint32(maxStreamID - 2 + 2*i)
			p.writeHeaders(id, false, ":status", "200")
			p.writeData(id, true, "ok")
			rt.wantBody("ok")
		}
		<-p.closed
		p.wantClosed()
	})
}

// TestPeerHeaderListLimits: a response header list over the 10 MiB the
// client announces (SETTINGS_MAX_HEADER_LIST_SIZE) fails its stream with
// a clear error, the connection going on, when it ends within the limit
// frame; a header block that goes on past the limit is a connection
// error, read no further than a frame beyond the limit; and a flood of
// empty CONTINUATIONs that never ends the block holds no memory and ends
// with the connection when the PING the client sends meanwhile goes
// unanswered (the block is still open: nothing else may come).
func TestPeerHeaderListLimits(t *testing.T) {
	// One field a frame: 10 fit in the 10 MiB limit (each counts
	// 1,000,037 bytes), 11 do not.
	const fieldSize = 1_000_037
	value := strings.Repeat("a", 1_000_000) // 625,000 bytes Huffman-coded
	frames := func(p *testPeer, n int) [][]byte {
		fs := [][]byte{p.headerBlock(":status", "200", "x-big", value)}
		rest := p.headerBlock("x-big", value)
		for range n - 1 {
			fs = append(fs, rest)
		}
		return fs
	}
	inBubble(t, "truncated", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		fs := frames(p, 11)
		p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: fs[0]})
		for i, f := range fs[1:] {
			p.fr.WriteContinuation(1, i == len(fs)-2, f)
		}
		p.wantRSTStream(1, http2.ErrCodeProtocol)
		if _, err := rt.result(); err == nil || !strings.Contains(err.Error(), "header list larger than") {
			t.Errorf("RoundTrip: %v, want an error about the header list's size", err)
		}
		p.wantAnswered(3, "/")
	})
	inBubble(t, "past the limit", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		fs := frames(p, 64)
		frameLen := int64(len(fs[1]) + 9)
		err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: fs[0]})
		for _, f := range fs[1:] {
			if err != nil {
				break
			}
			synctest.Wait()
			err = p.fr.WriteContinuation(1, false, f)
		}
		if err == nil {
			t.Fatalf("the client took all of a %d MiB header block", 64*frameLen>>20)
		}
		if limit := int64(maxHeaderListSize)/fieldSize*frameLen + 3*frameLen; p.wrote > limit {
			t.Errorf("the client read %d bytes of the header block, want at most %d (a frame past the limit)", p.wrote, limit)
		}
		p.wantGoAway(0, http2.ErrCodeProtocol)
		p.wantClosed()
		if _, err := rt.result(); err == nil {
			t.Error("RoundTrip succeeded")
		}
	})
	inBubble(t, "empty CONTINUATION flood", func(t *testing.T) {
		const readIdle, pingTimeout = 5 * time.Second, 3 * time.Second
		p, rt := getOnePeer(t, Config{ReadIdleTimeout: readIdle, PingTimeout: pingTimeout})
		start := time.Now()
		p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.headerBlock(":status", "200")})
		flooded := make(chan int, 1)
		go func() {
			n := 0
			for ; p.fr.WriteContinuation(1, false, nil) == nil; n++ {
				time.Sleep(10 * time.Millisecond)
			}
			flooded <- n
		}()
		select {
		case <-p.closed:
		case <-time.After(time.Minute):
			p.cc.Close()
			<-flooded
			t.Fatal("the connection still open after a minute of CONTINUATION flood")
		}
		n := <-flooded
		d := p.closedAt.Sub(start)
		_, err := rt.result()
		t.Logf("closed %v into the flood, after %d CONTINUATIONs: %v", d, n, err)
		if d < readIdle+pingTimeout || d > readIdle*6/5+pingTimeout {
			t.Errorf("closed %v into the flood, want between ReadIdleTimeout + PingTimeout and 1.2 × ReadIdleTimeout + PingTimeout", d)
		}
		if err == nil {
			t.Error("RoundTrip succeeded")
		}
	})
}

// TestPeerInformationalAndTrailers: 1xx answers before the final one are
// skipped (RoundTrip waits on), the client writing nothing; trailers come
// to Response.Trailer at the body's EOF. A 1xx that ends the stream, and
// trailers that do not, are stream errors (RST_STREAM PROTOCOL_ERROR).
func TestPeerInformationalAndTrailers(t *testing.T) {
	inBubble(t, "ok", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.writeHeaders(1, false, ":status", "103", "link", "</a.css>; rel=preload")
		p.writeHeaders(1, false, ":status", "100")
		if rt.isDone() {
			t.Fatal("RoundTrip returned on a 1xx answer")
		}
		p.wantIdle()
		p.writeHeaders(1, false, ":status", "200", "trailer", "x-sum")
		p.writeData(1, false, "body")
		p.writeHeaders(1, true, "x-sum", "abc")
		res := rt.response()
		if res.StatusCode != 200 || res.Header.Get("Link") != "" {
			t.Errorf("status %d, Link %q; want 200 and no Link", res.StatusCode, res.Header.Get("Link"))
		}
		rt.wantBody("body")
		if got := res.Trailer.Get("X-Sum"); got != "abc" {
			t.Errorf("trailer X-Sum %q, want abc", got)
		}
		p.wantIdle()
	})
	inBubble(t, "1xx ends the stream", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.writeHeaders(1, true, ":status", "100")
		p.wantRSTStream(1, http2.ErrCodeProtocol)
		if _, err := rt.result(); err == nil {
			t.Error("RoundTrip succeeded")
		}
	})
	inBubble(t, "trailers without END_STREAM", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.writeHeaders(1, false, ":status", "200")
		p.writeData(1, false, "body")
		p.writeHeaders(1, false, "x-sum", "abc")
		p.wantRSTStream(1, http2.ErrCodeProtocol)
		if b, err := io.ReadAll(rt.response().Body); string(b) != "body" || err == nil {
			t.Errorf("read %q, %v; want the body, then an error", b, err)
		}
	})
}

// TestPeerContentLength: several content-length fields that agree are one
// (the answer carries one line), and fields that disagree make the answer
// malformed (RFC 9113 8.1.1): RST_STREAM PROTOCOL_ERROR and an error, as
// net/http's Transport refuses them over HTTP/1.1. Passed on, they would
// reach an HTTP/1.1 client as two lines, framed by the first.
func TestPeerContentLength(t *testing.T) {
	inBubble(t, "equal values are one", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.writeHeaders(1, false, ":status", "200", "content-length", "4", "content-length", " 4")
		p.writeData(1, true, "body")
		res := rt.response()
		if got := res.Header["Content-Length"]; res.ContentLength != 4 || len(got) != 1 || got[0] != "4" {
			t.Errorf("ContentLength %d, header %q; want 4 and one line", res.ContentLength, got)
		}
		rt.wantBody("body")
	})
	inBubble(t, "conflicting values", func(t *testing.T) {
		p, rt := getOnePeer(t, Config{})
		p.writeHeaders(1, false, ":status", "200", "content-length", "4", "content-length", "40")
		p.wantRSTStream(1, http2.ErrCodeProtocol)
		if res, err := rt.result(); err == nil || !strings.Contains(err.Error(), "Content-Length") {
			t.Errorf("RoundTrip = %v, %v; want an error naming the conflicting Content-Length", res != nil, err)
		}
	})
}

// getOnePeer is a peer with cfg, greeted with the default SETTINGS, and
// a GET of / whose HEADERS it has read (stream 1).
func getOnePeer(t *testing.T, cfg Config) (*testPeer, *peerRT) {
	t.Helper()
	p := newTestPeer(t, cfg)
	p.greet()
	rt := p.get(t.Context(), "/")
	p.wantHeaders(1, true, 0)
	return p, rt
}

// TestPeerCancel: a request cancelled before its answer, while its body
// streams, by Body.Close, or by its deadline, sends RST_STREAM CANCEL and
// frees its stream slot at once (the server allows one stream); DATA the
// server had sent on it goes back to the connection window.
func TestPeerCancel(t *testing.T) {
	// The connection window is the initial one: it is given back once
	// half of it (32,767 bytes) is unacknowledged.
	cfg := Config{MaxReceiveBufferPerStream: InitialWindow, MaxReceiveBufferPerConnection: InitialWindow}
	next := func(t *testing.T, p *testPeer, id uint32) {
		t.Helper()
		if !p.cc.CanTakeStream() {
			t.Error("CanTakeStream false after the only stream was cancelled")
		}
		p.wantAnswered(id, "/next")
	}
	// oneStream is a peer that allows one stream and a GET of / with ctx
	// whose HEADERS it has read (stream 1).
	oneStream := func(t *testing.T, ctx context.Context) (*testPeer, *peerRT) {
		t.Helper()
		p := newTestPeer(t, cfg)
		p.greet(setting(http2.SettingMaxConcurrentStreams, 1))
		rt := p.get(ctx, "/")
		p.wantHeaders(1, true, 0)
		return p, rt
	}
	inBubble(t, "before the answer", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p, rt := oneStream(t, ctx)
		cancel()
		p.wantRSTStream(1, http2.ErrCodeCancel)
		if _, err := rt.result(); !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip: %v, want context.Canceled", err)
		}
		next(t, p, 3)
		// The server's late answer to stream 1.
		p.writeHeaders(1, false, ":status", "200")
		for range 3 {
			p.writeData(1, false, string(pattern(7, 16000)))
		}
		p.wantWindowUpdate(0, 48000)
		p.wantIdle()
	})
	inBubble(t, "while the body streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p, rt := oneStream(t, ctx)
		p.writeHeaders(1, false, ":status", "200")
		p.writeData(1, false, "x")
		body := rt.response().Body
		cancel()
		p.wantRSTStream(1, http2.ErrCodeCancel)
		if b, err := io.ReadAll(body); string(b) != "x" || !errors.Is(err, context.Canceled) {
			t.Errorf("read %q, %v; want x, then context.Canceled", b, err)
		}
		next(t, p, 3)
	})
	inBubble(t, "Body.Close", func(t *testing.T) {
		p, rt := oneStream(t, t.Context())
		p.writeHeaders(1, false, ":status", "200")
		p.writeData(1, false, "x")
		rt.response().Body.Close()
		p.wantRSTStream(1, http2.ErrCodeCancel)
		next(t, p, 3)
	})
	inBubble(t, "deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		p, rt := oneStream(t, ctx)
		<-rt.done
		if _, err := rt.result(); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 2*time.Second {
			t.Errorf("RoundTrip: %v after %v, want context.DeadlineExceeded after 2s", err, time.Since(start))
		}
		p.wantRSTStream(1, http2.ErrCodeCancel)
		next(t, p, 3)
	})
}

// TestPeerNoGoroutineLeak: after Close, no goroutine of the connection is
// left in the bubble: its reader, a request body's writer waiting for
// window, a streaming answer's context watch, a RoundTrip waiting for
// its answer.
func TestPeerNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := bubbleGoroutines()
		p := newTestPeer(t, Config{})
		p.greet(setting(http2.SettingInitialWindowSize, 0))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		post := p.post(ctx, "/upload", "waits for window")
		p.wantHeaders(1, false, 0)
		watch := p.get(ctx, "/watch")
		p.wantHeaders(3, true, 0)
		p.writeHeaders(3, false, ":status", "200")
		body := watch.response().Body
		pending := p.get(ctx, "/pending")
		p.wantHeaders(5, true, 0)
		if n := bubbleGoroutines() - base; n < 3 {
			t.Fatalf("%d goroutines beside the test's with the connection busy, want at least 3 (reader, body writer, RoundTrip)", n)
		}
		p.cc.Close()
		body.Close()
		for _, rt := range []*peerRT{post, pending} {
			if _, err := rt.result(); err == nil {
				t.Error("RoundTrip succeeded on a closed connection")
			}
		}
		synctest.Wait()
		if n := bubbleGoroutines() - base; n != 0 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left after Close:\n%s", n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// TestPeerReuseAfterStreamErrors: stream errors of the server's making (a
// malformed :status, DATA before HEADERS, a zero WINDOW_UPDATE on a
// stream) reset that stream with PROTOCOL_ERROR and leave the connection
// serving the next request.
func TestPeerReuseAfterStreamErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPeer(t, Config{})
		p.greet()
		for i, bad := range []func(id uint32){
			func(id uint32) { p.writeHeaders(id, true, ":status", "2xx") },
			func(id uint32) { p.writeData(id, true, "early") },
			func(id uint32) { p.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0}) },
		} {
			id := uint32(1 + 4*i)
			rt := p.get(t.Context(), "/bad")
			p.wantHeaders(id, true, 0)
			bad(id)
			p.wantRSTStream(id, http2.ErrCodeProtocol)
			if _, err := rt.result(); err == nil {
				t.Errorf("stream %d: RoundTrip succeeded", id)
			}
			ok := p.get(t.Context(), "/ok")
			p.wantHeaders(id+2, true, 0)
			p.writeHeaders(id+2, false, ":status", "200")
			p.writeData(id+2, true, "ok")
			ok.wantBody("ok")
		}
		select {
		case <-p.closed:
			t.Error("the connection closed")
		default:
		}
	})
}
