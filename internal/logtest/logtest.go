// Package logtest captures the log records of the code under test, for a test's assertions:
// a slog.Handler that keeps every record, and shows them on standard error as they come when
// $WASMHOST_TESTLOG (or the host tests' older $HOSTLOG) is set.
//
// This package is part of the daemon's tests, not a stable API.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// Logs is a slog.Handler that keeps the records it is given. Its zero value is ready.
type Logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Logger returns a logger whose records l keeps.
func (l *Logs) Logger() *slog.Logger { return slog.New(l) }

func (l *Logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *Logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *Logs) WithGroup(string) slog.Handler            { return l }

// Handle keeps r.
func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	if os.Getenv("WASMHOST_TESTLOG") != "" || os.Getenv("HOSTLOG") != "" {
		fmt.Fprintln(os.Stderr, r.Time.Format("15:04:05.000"), r.Level, r.Message, AttrString(r))
	}
	return nil
}

// Find returns the attributes of the first record whose message contains msg, as strings by
// key, with its level under "level".
func (l *Logs) Find(msg string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			attrs := map[string]string{"level": r.Level.String()}
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			return attrs, true
		}
	}
	return nil, false
}

// Count returns how many records' messages contain msg.
func (l *Logs) Count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// Matching returns the records at level or above whose message contains msg, each as its
// message followed by AttrString's pairs.
func (l *Logs) Matching(level slog.Level, msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Level >= level && strings.Contains(r.Message, msg) {
			out = append(out, r.Message+AttrString(r))
		}
	}
	return out
}

// NoErrors fails t for every record at level error.
func (l *Logs) NoErrors(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Level >= slog.LevelError {
			t.Errorf("logged an error: %s%s", r.Message, AttrString(r))
		}
	}
}

// AttrString returns r's attributes as " key=value" pairs.
func AttrString(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}
