package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/wasmhost/wasmhost/internal/unixsock"
	"golang.org/x/net/netutil"
)

// Handler returns the HTTP handler of the endpoints:
//
//	/metrics  the metrics, in any format Prometheus asks for
//	/healthz  200 "ok" while the process serves at all
//	/readyz   200 "ok" when Config.Ready returns nil, followed by what does not serve
//	          (Config.Problems), one line each; 503 and the reason otherwise
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		Registry: m.reg,
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := m.readyErr(); err != nil {
			plain(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		msg := "ok"
		if m.cfg.Problems != nil {
			for _, l := range m.cfg.Problems() {
				msg += "\n" + l
			}
		}
		plain(w, http.StatusOK, msg)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "wasmhost: /metrics /healthz /readyz")
	})
	return mux
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// Run serves Handler on Config.Addr until ctx is done, then shuts the server down: open
// requests get ShutdownTimeout to finish, then the connections are closed. With Addr "" it
// serves nothing and just waits for ctx. It returns when every goroutine it started has
// exited, after removing the unix socket it made. Metrics run once.
func (m *Metrics) Run(ctx context.Context) error {
	m.running.Lock()
	defer m.running.Unlock()
	if m.ran {
		return ErrRunning
	}
	m.ran = true

	network, address, _ := parseAddr(m.cfg.Addr) // checked by New
	if network == "" {
		<-ctx.Done()
		return nil
	}
	var (
		lis     net.Listener
		cleanup = func() {}
		err     error
	)
	if network == "unix" {
		lis, cleanup, err = unixsock.Listen(address)
		if err != nil {
			err = fmt.Errorf("metrics: %w", err)
		}
	} else {
		lis, err = net.Listen("tcp", address)
		if err != nil {
			err = fmt.Errorf("metrics: listening on %s: %w", address, err)
		}
	}
	if err != nil {
		return err
	}
	defer cleanup()
	lis = netutil.LimitListener(lis, m.cfg.MaxConnections)

	srv := &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       30 * time.Second,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelDebug),
	}
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- srv.Serve(lis) })
	m.log.Info("metrics listening", "addr", m.cfg.Addr)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("metrics: serving on %s: %w", m.cfg.Addr, err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	if err := srv.Shutdown(sctx); err != nil {
		m.log.Warn("metrics: requests still open after the shutdown timeout; closing connections",
			"addr", m.cfg.Addr, "timeout", m.cfg.ShutdownTimeout)
		srv.Close()
	}
	cancel()
	wg.Wait()
	return runErr
}

// parseAddr splits a Config.Addr into a network and an address; network "" means off.
func parseAddr(addr string) (network, address string, err error) {
	switch {
	case addr == "" || addr == "off":
		return "", "", nil
	case strings.HasPrefix(addr, "unix:"):
		p := strings.TrimPrefix(addr, "unix:")
		if !filepath.IsAbs(p) {
			return "", "", fmt.Errorf("%w: Addr %q: want unix: followed by an absolute path", ErrConfig, addr)
		}
		if len(p) > unixsock.MaxPath {
			return "", "", fmt.Errorf("%w: Addr %q: a unix socket path has at most %d bytes", ErrConfig, addr, unixsock.MaxPath)
		}
		return "unix", p, nil
	default:
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return "", "", fmt.Errorf("%w: Addr %q: want host:port (127.0.0.1:9436, :9436), unix:/path, or empty for off",
				ErrConfig, addr)
		}
		return "tcp", addr, nil
	}
}
