package testkit

import (
	"io"
	"net/http"
)

// Echo answers "ok" and reports in headers what the server saw of the
// client: X-Client-CN (its certificate's CN), X-Authorization, X-Proto.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		w.Header().Set("X-Client-CN", cn)
		w.Header().Set("X-Authorization", r.Header.Get("Authorization"))
		w.Header().Set("X-Proto", r.Proto)
		io.WriteString(w, "ok")
	})
}

// Streaming serves /watch as a stream that writes a line each
// time something arrives on lines and ends when lines closes; anything
// else is Echo.
func Streaming(lines <-chan string) http.Handler {
	echo := Echo()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/watch" {
			echo.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return
				}
				io.WriteString(w, l+"\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
}
