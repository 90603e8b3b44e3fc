// Package publish takes what handlers publish about their plugins to the cluster: node
// labels, feature attributes and instances, through sinks (a node-feature-discovery feature
// file, a NodeFeature object).
//
// It only reads the state store, and follows it level-triggered: the desired state is what
// the registered plugins published, filtered and named by each type's Rules (Build); the
// actual state is what each sink holds. A change in the store only wakes the publisher; it
// gathers changes for Config.Coalesce, builds the desired state again and writes it to every
// sink that does not hold it, so a burst of a thousand registrations is a handful of writes.
// A sink whose write fails is retried with jittered exponential backoff, on its own: the
// others, and registrations, never wait for it. At start each sink is asked what it holds
// (Load) and keeps it until the plugins found at start had their chance to register again,
// so that a restart does not take labels off the node and put them back.
//
// This package is part of the daemon, not a stable API.
package publish

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// Sink is where the node's features go.
type Sink interface {
	// SinkName names the sink in status, metrics and logs, as its config key does
	// (featureFile, nodeFeature).
	SinkName() string
	// Target says where it writes: a path, an object.
	Target() string
	// Load returns what the sink holds now, written by a previous run of the daemon.
	Load(ctx context.Context) (Node, error)
	// Write makes the sink hold n.
	Write(ctx context.Context, n Node) error
	// RefreshAfter is how long a write stays good: the sink is written again after it even
	// when nothing changed, less up to a tenth of it at random (RefreshJitter). 0: never.
	RefreshAfter() time.Duration
}

// Store is what the publisher reads; *state.Store implements it.
type Store interface {
	Subscribe() (*state.Subscription, []state.PluginView)
	Plugins() []state.PluginView
	Handlers() []state.Handler
}

// Config configures a Publisher.
type Config struct {
	// Store is the daemon's state. Required.
	Store Store
	// Rules are what each plugin type publishes, by type. Types without rules publish nothing.
	Rules map[string]Rules
	// MaxBytes bounds what the node publishes (Build, Node.Cost); what a sink held from
	// before is kept only within it too. Defaults to DefaultMaxBytes.
	MaxBytes int
	// Sinks are where it goes. Required: at least one, or Events.
	Sinks []Sink
	// Events takes what happens to the plugins and handlers to the cluster: a plugin
	// rejected, failing because of its handler, or lost; a handler quarantined or rolled
	// back. Defaults to nil: none.
	Events Recorder
	// Settled reports whether the plugins found at start have had their chance to register
	// (the daemon is ready and no socket is pending): what the sinks held from before is
	// then no longer kept. Defaults to nil: settled once no socket is pending.
	Settled func() bool
	// StartGrace bounds how long what the sinks held is kept if Settled never says so.
	// Defaults to 1m.
	StartGrace time.Duration
	// Coalesce is how long changes are gathered before a write. Defaults to 1s.
	Coalesce time.Duration
	// InitialBackoff and MaxBackoff bound the retries of a failed write (doubling, with up
	// to a fifth taken off at random). Default to 1s and 2m.
	InitialBackoff, MaxBackoff time.Duration
	// Logger receives the publisher's logs. Defaults to nil: discard.
	Logger *slog.Logger
	// Tracer, if set, traces each write of a sink, a trace of its own (internal/tracing).
	// Defaults to nil: none.
	Tracer trace.Tracer
}

// The defaults of Config's pacing: the one place they are written (config.Default takes them;
// constants of the daemon, docs/configuration.md).
const (
	DefaultStartGrace     = time.Minute
	DefaultCoalesce       = time.Second
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 2 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.StartGrace <= 0 {
		c.StartGrace = DefaultStartGrace
	}
	if c.Coalesce <= 0 {
		c.Coalesce = DefaultCoalesce
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.InitialBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// RefreshJitter is the most of a sink's RefreshAfter taken off at random for each refresh:
// a fleet of nodes started within a minute, or back together after an outage, would
// otherwise refresh in the same minute every time; spread over a tenth of the period, 5,000
// nodes refreshing every 10 minutes are about 8 writes a second, not 5,000 in a minute. Taken
// off, not added: a sink is never left longer than RefreshAfter without a write, which is
// what a reader judging staleness counts on.
const RefreshJitter = 10 // a tenth

// refreshIn returns when a sink written at wroteAt is written again (zero: never).
func refreshIn(refresh time.Duration, wroteAt time.Time) time.Time {
	if refresh <= 0 {
		return time.Time{}
	}
	return wroteAt.Add(refresh - time.Duration(rand.Int64N(int64(refresh)/RefreshJitter+1)))
}

// ErrConfig: the Config cannot work.
var ErrConfig = errors.New("publish: invalid config")

// The states of a sink.
const (
	SinkStarting = "starting" // it has not been read or written yet
	SinkOK       = "ok"       // it holds what was last built
	SinkFailing  = "failing"  // its last write failed; it is retried at NextRetry
)

// SinkStatus is what a sink holds and how its writes go.
type SinkStatus struct {
	Sink, Target string
	State        string
	// Writes and Failures count since the daemon started.
	Writes, Failures uint64
	LastWrite        time.Time
	LastError        string
	LastErrorAt      time.Time
	NextRetry        time.Time
	// Labels, Attributes and Instances are what it holds.
	Labels, Attributes, Instances int
	// Holding: what it held from before the start is still kept (StartGrace).
	Holding bool
}

// Status is the publisher's state.
type Status struct {
	Sinks []SinkStatus
	// Refused counts the keys the last build refused (as labels, or entirely); Refusals are
	// the first of them.
	Refused  int
	Refusals []Refusal
	// Events are the recorder's counts; nil without one.
	Events *EventStats
}

// MaxRefusalsShown is how many refusals Status lists.
const MaxRefusalsShown = 20

// Publisher follows the store and writes to the sinks. Make it with New.
type Publisher struct {
	cfg Config

	mu       sync.Mutex
	desired  Node
	gen      uint64 // bumped with every new desired
	settled  bool
	refused  []Refusal
	sinks    []*sinkWorker
	loggedRf map[string]bool
}

// New returns a publisher for cfg.
func New(cfg Config) (*Publisher, error) {
	if cfg.Store == nil || (len(cfg.Sinks) == 0 && cfg.Events == nil) {
		return nil, errors.Join(ErrConfig, errors.New("a store and at least one sink or a recorder are required"))
	}
	cfg = cfg.withDefaults()
	p := &Publisher{cfg: cfg, desired: Empty(), loggedRf: map[string]bool{}}
	for _, s := range cfg.Sinks {
		p.sinks = append(p.sinks, &sinkWorker{p: p, sink: s, wake: make(chan struct{}, 1), st: SinkStatus{Sink: s.SinkName(), Target: s.Target(), State: SinkStarting, Holding: true}})
	}
	return p, nil
}

// Run follows the store and writes to the sinks until ctx is done; it returns when every
// goroutine it started has.
func (p *Publisher) Run(ctx context.Context) error {
	sub, list := p.cfg.Store.Subscribe()
	defer sub.Close()
	events := newEventWatch()
	record := func(changes []state.Change) {
		if p.cfg.Events == nil {
			return
		}
		for _, e := range events.plugins(changes, time.Now()) {
			p.cfg.Events.Record(e)
		}
		for _, e := range events.handlerEvents(p.cfg.Store.Handlers()) {
			p.cfg.Events.Record(e)
		}
	}
	asChanges := func(list []state.PluginView) []state.Change {
		out := make([]state.Change, len(list))
		for i, v := range list {
			out[i] = state.Change{Type: state.Modified, View: v}
		}
		return out
	}
	record(asChanges(list))
	// Quarantines are in the handlers' counters, which the change feed does not carry; a
	// PluginLost held for LostGrace is raised at the next tick.
	handlerTick := time.NewTicker(2 * time.Second)
	defer handlerTick.Stop()
	start := time.Now()
	p.rebuild(start)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range p.sinks {
		wg.Go(func() { w.run(ctx) })
	}
	// While not settled, look again every second: readiness is not a store change.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var coalesce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-handlerTick.C:
			record(nil)
			continue
		case <-sub.C():
			// Events are edges: each change is looked at as it comes. The sinks' state is
			// rebuilt whole, after Coalesce.
			changes, reset, list := sub.Next()
			if reset {
				changes = asChanges(list)
			}
			record(changes)
			if len(p.sinks) == 0 {
				continue
			}
			if coalesce == nil {
				coalesce = time.After(p.cfg.Coalesce)
			}
			continue
		case <-coalesce:
			coalesce = nil
		case <-tick.C:
			if p.isSettled() {
				tick.Stop()
				continue
			}
		}
		p.rebuild(start)
	}
}

func (p *Publisher) isSettled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled
}

// rebuild builds the desired state from the store and wakes the sinks.
func (p *Publisher) rebuild(start time.Time) {
	views := p.cfg.Store.Plugins()
	n, refused := Build(views, p.cfg.Rules, p.cfg.MaxBytes)
	settled := time.Since(start) >= p.cfg.StartGrace
	if !settled {
		if p.cfg.Settled != nil {
			settled = p.cfg.Settled()
		} else {
			settled = true
		}
		for _, v := range views {
			if v.State == state.StatePending {
				settled = false
				break
			}
		}
	}
	p.mu.Lock()
	changed := !n.Equal(p.desired) || settled != p.settled
	if changed {
		p.desired, p.gen = n, p.gen+1
	}
	if settled && !p.settled {
		p.cfg.Logger.Info("publishing what is registered now; what the sinks held from before is no longer kept", "after", time.Since(start).Round(time.Millisecond))
	}
	p.settled = settled
	p.refused = refused
	var fresh []Refusal
	for _, r := range refused {
		if k := r.String(); !p.loggedRf[k] {
			p.loggedRf[k] = true
			fresh = append(fresh, r)
		}
	}
	if len(p.loggedRf) > 10000 {
		clear(p.loggedRf) // bounded: a handler publishing new values forever logs them again
	}
	p.mu.Unlock()
	for _, r := range fresh {
		p.cfg.Logger.Warn("published key not taken to the cluster as asked", "plugin_type", r.PluginType, "plugin", r.Plugin, "socket", r.Socket, "key", r.Key, "label_only", r.Label, "reason", r.Reason)
	}
	if p.cfg.Events != nil {
		for _, e := range leftOutEvents(fresh) {
			p.cfg.Events.Record(e)
		}
	}
	if changed {
		for _, w := range p.sinks {
			signal(w.wake)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// RefusalsOf returns the refusals of the last build about the plugin at socket.
func (p *Publisher) RefusalsOf(socket string) []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Refusal
	for _, r := range p.refused {
		if r.Socket == socket {
			out = append(out, r)
		}
	}
	return out
}

// Status returns each sink's status and the refusals of the last build.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{Refused: len(p.refused)}
	st.Refusals = slices.Clone(p.refused[:min(len(p.refused), MaxRefusalsShown)])
	for _, w := range p.sinks {
		st.Sinks = append(st.Sinks, w.st)
	}
	if p.cfg.Events != nil {
		es := p.cfg.Events.Stats()
		st.Events = &es
	}
	return st
}

// sinkWorker writes one sink: the desired state when it changed, again after RefreshAfter,
// and after a failure on a backoff of its own.
type sinkWorker struct {
	p    *Publisher
	sink Sink
	wake chan struct{}
	st   SinkStatus // guarded by p.mu
}

func (w *sinkWorker) run(ctx context.Context) {
	p, log := w.p, w.p.cfg.Logger.With("sink", w.sink.SinkName(), "target", w.sink.Target())
	var (
		held      Node
		loaded    bool
		written   Node
		wroteGen  uint64
		haveWrote bool
		refreshAt time.Time // zero: no refresh
		backoff   time.Duration
		leftOut   []string // what the sink itself left out last, logged when it changes
		timer     = time.NewTimer(0)
	)
	defer timer.Stop()
	fail := func(what string, err error) {
		if backoff == 0 {
			backoff = p.cfg.InitialBackoff
		} else {
			backoff = min(2*backoff, p.cfg.MaxBackoff)
		}
		wait := backoff - time.Duration(rand.Int64N(int64(backoff)/5+1))
		now := time.Now()
		p.mu.Lock()
		first := w.st.State != SinkFailing
		w.st.State, w.st.Failures = SinkFailing, w.st.Failures+1
		w.st.LastError, w.st.LastErrorAt, w.st.NextRetry = what+": "+err.Error(), now, now.Add(wait)
		p.mu.Unlock()
		if first {
			log.Warn("publishing failed; retrying with backoff", "op", what, "error", err, "retry_in", wait.Round(time.Millisecond))
		} else {
			log.Debug("publishing failed again", "op", what, "error", err, "retry_in", wait.Round(time.Millisecond))
		}
		timer.Reset(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
		if !loaded {
			n, err := w.sink.Load(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				fail("read what it holds", err)
				continue
			}
			held, loaded = n, true
			if l, a, i := n.Size(); l+a+i > 0 {
				log.Info("read what the sink holds from before; kept until the plugins found at start registered again", "labels", l, "attributes", a, "instances", i)
			}
		}
		p.mu.Lock()
		desired, gen, settled := p.desired, p.gen, p.settled
		p.mu.Unlock()
		if !settled {
			desired = merge(desired, held, p.cfg.MaxBytes)
		} else {
			held = Node{}
		}
		due := haveWrote && !refreshAt.IsZero() && !time.Now().Before(refreshAt)
		if haveWrote && !due && w.lastOK() && (gen == wroteGen || desired.Equal(written)) {
			wroteGen = gen
			p.mu.Lock()
			w.st.Holding = !settled // it holds the same, now as what is registered
			p.mu.Unlock()
			rearm(timer, refreshAt)
			continue
		}
		if err := w.write(ctx, desired); err != nil {
			if ctx.Err() != nil {
				return
			}
			fail("write", err)
			continue
		}
		backoff = 0
		if lo, ok := w.sink.(interface{ LeftOut() []string }); ok && len(lo.LeftOut()) > 0 && !slices.Equal(lo.LeftOut(), leftOut) {
			leftOut = slices.Clone(lo.LeftOut())
			log.Warn("entries too large for the sink left out; the rest written", "entries", len(leftOut), "first", leftOut[0])
		}
		wroteAt := time.Now()
		written, wroteGen, haveWrote, refreshAt = desired, gen, true, refreshIn(w.sink.RefreshAfter(), wroteAt)
		l, a, i := desired.Size()
		p.mu.Lock()
		recovered := w.st.State == SinkFailing
		w.st.State, w.st.Writes, w.st.LastWrite, w.st.NextRetry = SinkOK, w.st.Writes+1, wroteAt, time.Time{}
		w.st.Labels, w.st.Attributes, w.st.Instances, w.st.Holding = l, a, i, !settled
		p.mu.Unlock()
		if recovered {
			log.Info("publishing works again")
		}
		rearm(timer, refreshAt)
	}
}

// write makes the sink hold n, traced as wasmhost.publish.<sink>.
func (w *sinkWorker) write(ctx context.Context, n Node) error {
	ctx, span := tracing.StartRoot(ctx, w.p.cfg.Tracer, tracing.SpanPublish+"."+w.sink.SinkName())
	err := w.sink.Write(ctx, n)
	if span.IsRecording() {
		l, a, i := n.Size()
		span.SetAttributes(attribute.String(tracing.AttrSink, w.sink.SinkName()), attribute.String("wasmhost.publish.target", w.sink.Target()),
			attribute.Int("wasmhost.publish.labels", l), attribute.Int("wasmhost.publish.attributes", a), attribute.Int("wasmhost.publish.instances", i))
	}
	tracing.End(span, err, "write_failed")
	return err
}

func (w *sinkWorker) lastOK() bool {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.st.State == SinkOK
}

// rearm sets the timer to the next refresh (at), or stops it (zero).
func rearm(t *time.Timer, at time.Time) {
	if at.IsZero() {
		t.Stop()
		return
	}
	t.Reset(max(time.Until(at), 0))
}
