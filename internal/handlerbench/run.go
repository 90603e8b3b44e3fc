package handlerbench

// The runs of a bench: the workload's calls on threads of their own, alternating with the
// reference module's, each run a sample of the CPU per call.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmhost/wasmhost/internal/benchcmp"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// Call is one call of a workload: an export, for a plugin.
type Call struct {
	Op     harness.Op
	Plugin registration.PluginInfo
}

// SessionAnswers answers plugin_call from sessions: the first exchange of the same method and
// request, else of the same method. It keeps no state, so that calls may run at once.
type SessionAnswers []session.Exchange

// Call answers a plugin_call of method with req from the sessions' exchanges.
func (a SessionAnswers) Call(_ context.Context, _, method string, req []byte, _ int) ([]byte, error) {
	pick := -1
	for i, x := range a {
		if x.Method == method && string(x.Request) == string(req) {
			pick = i
			break
		}
		if pick < 0 && x.Method == method {
			pick = i
		}
	}
	if pick < 0 {
		return nil, fmt.Errorf("bench: no session has a plugin_call %s", method)
	}
	if x := a[pick]; x.Code < 0 {
		return nil, errors.New(x.Error)
	}
	return slices.Clone(a[pick].Response), nil
}

// SessionWork is the workload of sessions (complete: session.Replayable): their calls in
// order, each for the plugin its session recorded, the plugin_calls' answers from them, and
// the plugin types they are of.
func SessionWork(sessions []*session.Session) (work []Call, answers SessionAnswers, types []string) {
	for _, s := range sessions {
		p := harness.PluginInfo(s)
		types = append(types, p.Type)
		for _, c := range s.Calls {
			work = append(work, Call{Op: harness.Op(c.Export), Plugin: p})
			for _, x := range c.Exchanges {
				if x.Fn == session.PluginCall {
					answers = append(answers, x)
				}
			}
		}
	}
	return work, answers, types
}

// Options say how a bench runs.
type Options struct {
	// Concurrency is how many calls run at once (the host needs as many instances: its
	// PoolSize).
	Concurrency int
	// Count is the number of runs, each a sample; Duration is that of all of them together.
	Count    int
	Duration time.Duration
}

// Run loads the module at path into h (the compile timed) and the reference module beside it,
// runs work on them as o says, and returns the figures. Failed calls (an error, a trap, the
// deadline; not a rejection) are counted in Result.Failed, and their times included.
func Run(ctx context.Context, h *host.Host, path string, work []Call, o Options) (*Result, error) {
	if len(work) == 0 {
		return nil, errors.New("bench: no calls to run")
	}
	start := time.Now()
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s did not load: %w", path, err)
	}
	defer m.Close(context.WithoutCancel(ctx))
	res := &Result{File: path, SHA256: m.SHA256(), Concurrency: o.Concurrency, Compile: time.Since(start), Exports: map[string]Stats{}}

	ref, err := loadReference(ctx, h)
	if err != nil {
		return nil, err
	}
	defer ref.Close(context.WithoutCancel(ctx))
	runs, err := runAll(ctx, m, ref, work, o)
	if err != nil {
		return nil, err
	}
	res.Memory, res.Instances = m.InstanceMemory(), o.Concurrency
	all := map[harness.Op][]time.Duration{}
	var busy time.Duration
	for _, r := range runs {
		for op, ds := range r.lat {
			all[op] = append(all[op], ds...)
		}
		res.Failed += r.failed
		res.Elapsed += r.elapsed
		perCall := float64(r.cpu.Nanoseconds()) / float64(max(1, r.calls))
		res.Samples.CPUPerCall = append(res.Samples.CPUPerCall, perCall)
		res.Samples.RelativeCPU = append(res.Samples.RelativeCPU, perCall/(float64(r.refCPU.Nanoseconds())/float64(max(1, r.refCalls))))
		busy += r.busy
		res.Samples.CallsPerSec = append(res.Samples.CallsPerSec, float64(r.calls)/r.busy.Seconds())
	}
	for op, ds := range all {
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		res.Calls += len(ds)
		res.Exports[string(op)] = Stats{Calls: len(ds), Mean: sum / time.Duration(len(ds)),
			P50: benchcmp.Percentile(ds, 0.50), P95: benchcmp.Percentile(ds, 0.95), P99: benchcmp.Percentile(ds, 0.99)}
	}
	res.CallsPerSec = float64(res.Calls) / busy.Seconds()
	return res, nil
}

// run is what one run of a bench measured.
type run struct {
	lat     map[harness.Op][]time.Duration
	calls   int
	failed  int
	cpu     time.Duration // the CPU time of the calls' threads
	elapsed time.Duration
	// busy is the time the module's calls ran, the reference's turns left out (summed over
	// the callers, divided by their number).
	busy time.Duration
	// refCalls calls of the reference module took refCPU, in batches between the module's.
	refCalls int
	refCPU   time.Duration
}

// batch is how long a bench runs the module's calls, then the reference's, in turn.
const batch = 2 * time.Millisecond

// runAll runs the workload o.Count times for o.Duration/o.Count each, with o.Concurrency
// callers, each running the module's calls and the reference module's in turn, batch each.
func runAll(ctx context.Context, m, ref module, work []Call, o Options) ([]run, error) {
	runs := make([]run, o.Count)
	refCall := Call{Op: harness.Validate, Plugin: registration.PluginInfo{Type: ReferenceType, Name: "reference"}}
	next := 0 // where in the workload the next run starts, so that runs go through all of it
	for k := range runs {
		r := &runs[k]
		r.lat = map[harness.Op][]time.Duration{}
		ws := make([]run, o.Concurrency)
		start := time.Now()
		deadline := start.Add(o.Duration / time.Duration(o.Count))
		var wg sync.WaitGroup
		for w := range o.Concurrency {
			ws[w].lat = map[harness.Op][]time.Duration{}
			wg.Go(func() {
				// The calls run on this goroutine's thread, whose CPU clock counts them.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b := &ws[w]
				for i := next + w; ctx.Err() == nil && time.Now().Before(deadline); {
					cpu0, batchEnd := threadCPU(), time.Now().Add(batch)
					for ; ctx.Err() == nil && time.Now().Before(batchEnd); i += o.Concurrency {
						c := work[i%len(work)]
						t0 := time.Now()
						err := callOnce(ctx, m, c)
						b.lat[c.Op] = append(b.lat[c.Op], time.Since(t0))
						b.calls++
						if err != nil && !errors.Is(err, registration.ErrRejected) {
							b.failed++
						}
					}
					cpu1, now := threadCPU(), time.Now()
					b.cpu += cpu1 - cpu0
					b.busy += now.Sub(batchEnd.Add(-batch))
					batchEnd = now.Add(batch)
					for ctx.Err() == nil && time.Now().Before(batchEnd) {
						_ = callOnce(ctx, ref, refCall)
						b.refCalls++
					}
					b.refCPU += threadCPU() - cpu1
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.elapsed = time.Since(start)
		for _, b := range ws {
			for op, ds := range b.lat {
				r.lat[op] = append(r.lat[op], ds...)
			}
			r.failed += b.failed
			r.cpu += b.cpu
			r.calls += b.calls
			r.refCPU += b.refCPU
			r.refCalls += b.refCalls
			r.busy += b.busy / time.Duration(o.Concurrency)
		}
		next += r.calls
	}
	return runs, nil
}

// module is what a bench calls of a loaded module.
type module interface {
	ValidatePlugin(ctx context.Context, p registration.PluginInfo) error
	RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error)
	DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error
	Close(ctx context.Context) error
}

func callOnce(ctx context.Context, m module, c Call) error {
	switch c.Op {
	case harness.Validate:
		return m.ValidatePlugin(ctx, c.Plugin)
	case harness.Register:
		_, err := m.RegisterPlugin(ctx, c.Plugin)
		return err
	default:
		return m.DeRegisterPlugin(ctx, c.Plugin)
	}
}

// threadCPU returns the CPU time of the calling thread so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// loadReference loads the reference module (WorkModule of ReferenceLoops) into h, from a
// file in a private temporary directory it removes.
func loadReference(ctx context.Context, h *host.Host) (module, error) {
	dir, err := os.MkdirTemp("", "wasmhost-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "reference.wasm")
	if err := os.WriteFile(path, WorkModule(ReferenceLoops, ReferenceType), 0o644); err != nil {
		return nil, err
	}
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("the reference module did not load: %w", err)
	}
	return m, nil
}
