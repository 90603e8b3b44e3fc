package daemon

import (
	"fmt"
	"syscall"
)

// raiseFDLimit raises the soft limit of open descriptors to the hard one and returns it. (The
// Go runtime does the same at start since Go 1.19; doing it here keeps the daemon's figure
// independent of that and gives the number the in-flight bound is checked against.)
func raiseFDLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("reading the descriptor limit: %w", err)
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return lim.Cur, fmt.Errorf("raising the descriptor limit from %d to %d: %w", lim.Cur, lim.Max, err)
		}
		lim = want
	}
	return lim.Cur, nil
}

// inFlightWithin returns the in-flight bound to use: the configured one, or a quarter of the
// descriptor limit when that is lower (each operation in flight holds a connection; the rest
// is left to the liveness watch of registered plugins, the handler files and the listeners).
func inFlightWithin(configured int, fdLimit uint64) int {
	quarter := fdLimit / 4
	if fdLimit == 0 || uint64(configured) <= quarter {
		return configured
	}
	return max(int(quarter), 1)
}
