package daemon

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// Each way a registration or a handler call ends has a label of its own, whatever wraps it.
func TestResultOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("registrar: plugin p: %w", err) }
	for err, want := range map[error]string{
		nil: metrics.ResultOK,
		wrap(fmt.Errorf("%w: %w", registration.ErrHandlerFailed, context.DeadlineExceeded)): metrics.ResultTimeout,
		wrap(fmt.Errorf("%w: %w", registration.ErrHandlerFailed, sandbox.ErrTrap)):          metrics.ResultTrap,
		wrap(fmt.Errorf("%w: %w", registration.ErrHandlerFailed, policy.ErrQuarantined)):    metrics.ResultQuarantined,
		wrap(registration.ErrRejected):      metrics.ResultRejected,
		wrap(registration.ErrNoHandler):     metrics.ResultNoHandler,
		wrap(registration.ErrUnreachable):   metrics.ResultUnreachable,
		wrap(registration.ErrProtocol):      metrics.ResultProtocol,
		wrap(registration.ErrNotifyFailed):  metrics.ResultNotifyFailed,
		wrap(typeslots.ErrBusy):             metrics.ResultTypeBusy,
		wrap(registration.ErrHandlerFailed): metrics.ResultError,
	} {
		if got := resultOf(err); got != want {
			t.Errorf("resultOf(%v) = %q, want %q", err, got, want)
		}
	}
}
