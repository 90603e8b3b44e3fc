package registrar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
)

// Retry schedule for a refused or busy connect: short, because the usual cause is a plugin
// between bind() and listen(), which lasts microseconds to milliseconds. A first retry after
// 100 µs was tried and measured worse (BenchmarkE2ERegister/native p50 0.86–1.35 ms against
// 0.63–0.76 ms with 1 ms, A/B on the same machine), so it stays at 1 ms.
const (
	firstRetry = time.Millisecond
	maxRetry   = 20 * time.Millisecond
)

// dial connects to the plugin's unix socket, within DialTimeout.
//
// A socket file exists from the plugin's bind(), before its listen(); a connect in between is
// refused. So a refused connect is retried promptly while the socket is young (less than
// ListenGrace since it was first seen); after that, refused means nobody is listening (a stale
// socket left by a dead plugin) and dial gives up at once. A connect that finds the listen
// backlog full (EAGAIN) is retried until DialTimeout: the plugin is alive but busy.
func (r *Registrar) dial(ctx context.Context, s state.Socket) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	defer cancel()
	seen := s.Seen
	if seen.IsZero() {
		seen = r.cfg.Now()
	}
	graceEnd := seen.Add(r.cfg.ListenGrace)
	var d net.Dialer
	var timer *time.Timer
	wait := firstRetry
	for attempt := 1; ; attempt++ {
		c, err := d.DialContext(ctx, "unix", s.Path)
		if err == nil {
			if timer != nil {
				timer.Stop()
			}
			return c, nil
		}
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return nil, fmt.Errorf("%w: socket %s: the daemon is out of file descriptors (%s); raise its descriptor limit (LimitNOFILE, ulimit -n): %w",
				registration.ErrUnreachable, s.Path, fdLimitText(), err)
		}
		refused := errors.Is(err, syscall.ECONNREFUSED)
		retry := errors.Is(err, syscall.EAGAIN) || (refused && r.cfg.Now().Before(graceEnd))
		if !retry || ctx.Err() != nil {
			what := "dial"
			if refused {
				what = "nobody is listening"
			}
			return nil, fmt.Errorf("%w: socket %s: %s after %d attempt(s), socket first seen %s ago: %w",
				registration.ErrUnreachable, s.Path, what, attempt, r.cfg.Now().Sub(seen).Round(time.Millisecond), err)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w: socket %s: dial gave up after %d attempt(s): %w (last: %v)",
				registration.ErrUnreachable, s.Path, attempt, ctx.Err(), err)
		case <-timer.C:
		}
		wait = min(2*wait, maxRetry)
	}
}

// fdLimitText describes the process's descriptor limit and use, for an exhaustion error.
func fdLimitText() string {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return "limit unknown"
	}
	text := fmt.Sprintf("limit %d", lim.Cur)
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		text += fmt.Sprintf(", %d open", len(ents))
	}
	return text
}
