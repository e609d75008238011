package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Handler serves the agent's HTTP endpoints: /healthz (503 with the
// reasons while the access check finds problems; acc may be nil), the
// Prometheus exposition at /metrics and, when rounds is not nil, the
// controller's last rounds at /v1/rounds.
func Handler(tel *Telemetry, acc *AccessCheck, rounds *RoundLog) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := acc.Health()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	})
	mux.Handle("/metrics", tel.Handler())
	if rounds != nil {
		mux.Handle("/v1/rounds", rounds)
		mux.Handle("/v1/rounds/", rounds)
	}
	return mux
}

// Serve listens on addr and serves h until ctx ends; it returns once the
// listener is open (the error is about opening it) and shuts the server
// down in the background when ctx is done.
func Serve(ctx context.Context, addr string, h http.Handler, log hclog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr(), nil
}
