package demo

import (
	"log/slog"
	"net/http"
	"time"
)

// LogRequests logs one line per request to log: method, path, idempotency
// key, status and duration. Status 0 means no response was sent (the
// connection was dropped on purpose).
func LogRequests(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		log.Info("request",
			"method", r.Method,
			"path", r.URL.EscapedPath(),
			"key", r.Header.Get(idempotencyKeyHeader),
			"status", rec.status,
			"duration", time.Since(start))
	})
}

// statusRecorder remembers the status sent. Unwrap lets
// http.ResponseController reach the connection, for dropConnection.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter {
	return r.ResponseWriter
}
