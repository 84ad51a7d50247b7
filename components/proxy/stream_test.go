package proxy

import (
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

const (
	largeBody = 200 << 20
	// heapSlack is how much the heap may grow while largeBody bytes pass
	// through client, proxy and apiserver in this one process. Buffering
	// the body anywhere would cost largeBody.
	heapSlack = 32 << 20
	// sampleEvery is how often the heap is measured during a transfer.
	sampleEvery = 8 << 20
)

// patternReader yields n pseudo-random bytes without holding them, and
// hashes what it yields.
type patternReader struct {
	n     int64
	off   int
	block []byte
	sum   hash.Hash32
}

func newPatternReader(n int64) *patternReader {
	block := make([]byte, 64<<10+7) // odd size: misaligned copies show
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	return &patternReader{n: n, block: block, sum: crc32.NewIEEE()}
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	r.n -= int64(n)
	r.sum.Write(p[:n])
	return n, nil
}

// heapMeter records the largest HeapInuse seen above a baseline.
type heapMeter struct {
	mu       sync.Mutex
	base     uint64
	peak     uint64
	sinceLog int64
}

// reset takes the baseline after a GC.
func (m *heapMeter) reset() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base, m.peak, m.sinceLog = ms.HeapInuse, ms.HeapInuse, 0
}

// consume reads r to the end, sampling the heap, and returns the count and
// the checksum of what it read.
func (m *heapMeter) consume(r io.Reader) (int64, uint32, error) {
	sum := crc32.NewIEEE()
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := r.Read(buf)
		sum.Write(buf[:n])
		total += int64(n)
		m.sample(int64(n))
		if err == io.EOF {
			return total, sum.Sum32(), nil
		}
		if err != nil {
			return total, sum.Sum32(), err
		}
	}
}

func (m *heapMeter) sample(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sinceLog += n
	if m.sinceLog < sampleEvery {
		return
	}
	m.sinceLog = 0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.peak = max(m.peak, ms.HeapInuse)
}

func (m *heapMeter) growth() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak - m.base
}

func TestLargeBodiesStreamInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 600 MB")
	}
	tests := []struct {
		name    string
		upload  bool
		chunked bool
	}{
		{"upload with length", true, false},
		{"chunked upload", true, true},
		{"download", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			type got struct {
				n   int64
				sum uint32
				err error
			}
			meter := new(heapMeter)
			upstreamGot := make(chan got, 1)
			addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.upload {
					n, sum, err := meter.consume(r.Body)
					upstreamGot <- got{n, sum, err}
					return
				}
				src := newPatternReader(largeBody)
				w.Header().Set("Content-Length", strconv.Itoa(largeBody))
				io.Copy(w, src)
				upstreamGot <- got{largeBody, src.sum.Sum32(), nil}
			}), false)
			p := proxytest.NewPicker(addr)
			u := proxytest.NewUpstream()
			u.Set(addr, rt)
			_, _, base := startProxy(t, Config{}, p, u, nil)
			client := testkit.NewClient(t, false)
			meter.reset()

			if tc.upload {
				src := newPatternReader(largeBody)
				var body io.Reader = src
				if tc.chunked {
					body = io.NopCloser(src)
				}
				req, _ := http.NewRequest("POST", base+"/api/v1/namespaces/ns/configmaps", body)
				if !tc.chunked {
					req.ContentLength = largeBody
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				g := <-upstreamGot
				if g.err != nil || g.n != largeBody || g.sum != src.sum.Sum32() {
					t.Errorf("apiserver got %d bytes (crc %08x, err %v), want %d (crc %08x)", g.n, g.sum, g.err, largeBody, src.sum.Sum32())
				}
			} else {
				resp, err := client.Get(base + "/api/v1/pods")
				if err != nil {
					t.Fatal(err)
				}
				n, sum, err := meter.consume(resp.Body)
				resp.Body.Close()
				g := <-upstreamGot
				if err != nil || n != largeBody || sum != g.sum {
					t.Errorf("client got %d bytes (crc %08x, err %v), want %d (crc %08x)", n, sum, err, largeBody, g.sum)
				}
			}
			growth := meter.growth()
			t.Logf("heap in use grew by at most %.1f MiB while moving %d MiB", float64(growth)/(1<<20), largeBody>>20)
			if growth > heapSlack {
				t.Errorf("heap grew by %d MiB, want at most %d MiB: the body is being buffered", growth>>20, heapSlack>>20)
			}
		})
	}
}
