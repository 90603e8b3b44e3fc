package policy

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/limits"
)

// ErrQuarantined: the handler trapped or timed out too many times in a row, and its calls fail
// at once for a while (Config.Quarantine) instead of each burning a deadline.
var ErrQuarantined = errors.New("host: handler quarantined")

// Quarantine is the quarantine state of one handler file (the reloader keeps one per file, and
// gives it to the modules of the file, NewServing): a new version of the file starts afresh
// (Reset). Its zero value is ready to use.
type Quarantine struct {
	mu       sync.Mutex
	faults   int           // traps and timeouts in a row
	until    time.Time     // quarantined until then; zero when not quarantined
	backoff  time.Duration // the length of the current (or last) quarantine
	probing  bool          // the probe call is in flight
	reason   string        // the last fault, said in the fast failures
	entered  uint64        // times quarantined
	rejected uint64        // calls failed at once
}

// QuarantineStatus is what HandlerStatus shows of a handler's quarantine.
type QuarantineStatus struct {
	Quarantined bool      // calls fail at once (or one probe is being let through)
	Until       time.Time // when the next probe is let through
	Reason      string    // the fault that put it there
	Faults      int       // traps and timeouts in a row
	Count       uint64    // times it was quarantined
	FastFailed  uint64    // calls failed at once because of it
}

// Status is what HandlerStatus shows of the quarantine.
func (q *Quarantine) Status() QuarantineStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QuarantineStatus{
		Quarantined: !q.until.IsZero(), Until: q.until, Reason: q.reason,
		Faults: q.faults, Count: q.entered, FastFailed: q.rejected,
	}
}

// admit lets a call through, or says why it fails at once. probe is true for the one call let
// through when a quarantine's back-off has passed.
func (q *Quarantine) admit(now time.Time, file string) (probe bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.until.IsZero():
		return false, nil
	case now.Before(q.until) || q.probing:
		q.rejected++
		when := "until " + q.until.Format(time.RFC3339)
		if q.probing {
			when = "while a probe call runs"
		}
		return false, fmt.Errorf("%w: %s: %d traps or timeouts in a row, the last: %s; its calls fail at once %s, then one is let through as a probe",
			ErrQuarantined, file, q.faults, q.reason, when)
	}
	q.probing = true
	return true, nil
}

// quarantineChange is what an outcome did to the quarantine, for the log.
type quarantineChange int

const (
	quarantineSame quarantineChange = iota
	quarantineEntered
	quarantineLeft
)

// outcome records how an admitted call ended: fault (it trapped or timed out, with reason),
// or not; neutral calls (canceled, the module closed) are neither.
func (q *Quarantine) outcome(cfg *limits.Quarantine, probe, neutral, fault bool, reason string, now time.Time) (quarantineChange, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if probe {
		q.probing = false
	}
	switch {
	case neutral:
		return quarantineSame, 0
	case !fault:
		q.faults = 0
		if !q.until.IsZero() && probe {
			q.until, q.backoff = time.Time{}, 0
			return quarantineLeft, 0
		}
		return quarantineSame, 0
	}
	q.faults++
	q.reason = reason
	switch {
	case cfg.After <= 0: // disabled
		return quarantineSame, 0
	case probe:
		q.backoff = min(2*q.backoff, time.Duration(cfg.MaxBackoff))
	case q.until.IsZero() && q.faults >= cfg.After:
		q.backoff = time.Duration(cfg.Backoff)
	default:
		return quarantineSame, 0
	}
	q.until = now.Add(q.backoff)
	q.entered++
	return quarantineEntered, q.backoff
}

// Reset starts afresh, for a new version of the file.
func (q *Quarantine) Reset() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.faults, q.until, q.backoff, q.probing, q.reason = 0, time.Time{}, 0, false, ""
}
