package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/wasmhost/wasmhost/internal/publish"
)

// EventResource is events.k8s.io/v1's Event.
var EventResource = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}

// How Events are aggregated and bounded. An event like one recorded less than SeriesWindow
// ago (same type, reason, action and note) is not a new Event but a count on the first one's
// series, written at most every SeriesFlush. Every write of an Event, a create or a series
// update, takes a token from a bucket of EventBurst refilled one per EventRefill: a node writes
// at most EventBurst Events at once, then one a minute (creating an Event named by an earlier
// run of the daemon costs two more requests: it continues that Event's series). What waits for
// a token, or for the API server to come back, waits in a queue of at most MaxPendingEvents
// entries and MaxPendingBytes, where like events are one entry with a count: they are sent as
// one Event with a series when a token is there and the API server answers. Past the queue's
// bound an event is dropped and counted (wasmhost_publish_events_total{result="dropped"}),
// and logged once until the queue empties. An Event's name is made of its node and a hash of
// what it tells, so that a like event after the window, or after the daemon restarts, adds to
// the series of the Event the API server still keeps (an hour, by default) rather than telling
// the same thing twice.
const (
	SeriesWindow     = 6 * time.Minute
	SeriesFlush      = 30 * time.Second
	EventBurst       = 25
	EventRefill      = time.Minute
	MaxPendingEvents = 256
	MaxPendingBytes  = 128 << 10
	// ReportingController is the controller the Events name.
	ReportingController = "wasmhost.dev/wasmhost"
	// maxNote is events.k8s.io/v1's limit on a note.
	maxNote = 1024
	// pendingOverhead is what a queued event costs beside its text, counted in
	// MaxPendingBytes.
	pendingOverhead = 96
)

// Recorder records Events on the Node (events.k8s.io/v1, in namespace default, as the
// kubelet's Node events are), so that `kubectl describe node` and `kubectl events` show what
// happened to the node's plugins and handlers. Record never blocks: the API calls are made
// by Run, and what does not fit its queue is dropped and counted.
type Recorder struct {
	client dynamic.Interface
	node   string
	now    func() time.Time
	log    *slog.Logger
	wake   chan struct{} // one slot: Record tells Run that the queue grew
	// Flush is how often the series that grew are written: SeriesFlush unless changed
	// before Run (tests shorten it).
	Flush time.Duration
	// InitialBackoff and MaxBackoff pace the writes after one failed (the API server is
	// down): the wait doubles from the first to the second, with jitter. Defaults 1s and 30s;
	// set before Run.
	InitialBackoff, MaxBackoff time.Duration

	mu           sync.Mutex
	stats        publish.EventStats
	series       map[string]*series
	pending      map[string]*pendingEvent // by key, what waits to be created
	order        []string                 // the keys of pending, oldest first
	pendingBytes int
	dropLogged   bool // a drop was logged since the queue was last empty
	tokens       float64
	refilled     time.Time
}

// series is an Event written, and how many times it happened.
type series struct {
	e            publish.Event
	name         string
	count        int
	lastObserved time.Time
	written      int // count last written
}

// pendingEvent is an event waiting to be created, count times between first and last.
type pendingEvent struct {
	e           publish.Event
	count       int
	counted     int // of count, those counted as recorded already (on a series whose Event was gone)
	first, last time.Time
	size        int
}

// NewRecorder returns a recorder of Events on node. A nil log discards.
func NewRecorder(client dynamic.Interface, node string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{client: client, node: node, now: time.Now, log: log, wake: make(chan struct{}, 1),
		series: map[string]*series{}, pending: map[string]*pendingEvent{}, tokens: EventBurst,
		Flush: SeriesFlush, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
}

// Record counts e on its series, or queues it to be written.
func (r *Recorder) Record(e publish.Event) {
	e.Note = cutNote(e.Note)
	key := eventKey(e)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pending[key]; ok {
		p.count++
		p.last = now
		return
	}
	if s, ok := r.series[key]; ok && now.Sub(s.lastObserved) < SeriesWindow {
		s.count++
		s.lastObserved = now
		r.stats.Recorded++
		return
	}
	r.queueLocked(e, key, 1, now, now)
}

// queueLocked queues count occurrences of e, first and last seen as given, or drops them
// past the queue's bound.
func (r *Recorder) queueLocked(e publish.Event, key string, count int, first, last time.Time) *pendingEvent {
	if p, ok := r.pending[key]; ok {
		p.count += count
		p.first, p.last = minTime(p.first, first), maxTime(p.last, last)
		return p
	}
	size := len(key) + pendingOverhead
	if len(r.pending) >= MaxPendingEvents || r.pendingBytes+size > MaxPendingBytes {
		r.stats.Dropped += uint64(count)
		if !r.dropLogged {
			r.dropLogged = true
			r.log.Warn("Events dropped: the queue of Events waiting to be written is full (the API server is down, or Events come faster than they may be written); counted in wasmhost_publish_events_total{result=\"dropped\"}, logged once until the queue empties",
				"max_entries", MaxPendingEvents, "max_bytes", MaxPendingBytes, "reason", e.Reason, "note", e.Note)
		}
		return nil
	}
	p := &pendingEvent{e: e, count: count, first: first, last: last, size: size}
	r.pending[key] = p
	r.order = append(r.order, key)
	r.pendingBytes += size
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return p
}

// Stats returns what was recorded, dropped and failed, and what waits.
func (r *Recorder) Stats() publish.EventStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.Pending = len(r.pending)
	return st
}

// Run writes the queued events and the series that grew until ctx is done.
func (r *Recorder) Run(ctx context.Context) error {
	flush := time.NewTicker(r.Flush)
	defer flush.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	timer.Stop()
	var backoff time.Duration // zero while the API server answers
	failed := func() {
		backoff = min(max(2*backoff, r.InitialBackoff), r.MaxBackoff)
		timer.Reset(backoff/2 + rand.N(backoff/2+1))
	}
	// drain writes what is queued, and has the timer wake the loop when a token is due, or
	// when to try again after a failure.
	drain := func() {
		wait, ok := r.drain(ctx)
		switch {
		case ctx.Err() != nil:
		case !ok:
			failed()
		case wait > 0:
			backoff = 0
			timer.Reset(wait)
		default:
			backoff = 0
			timer.Stop()
		}
	}
	drain()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			if backoff == 0 {
				drain()
			}
		case <-timer.C:
			drain()
		case <-flush.C:
			if backoff == 0 && !r.flushSeries(ctx) && ctx.Err() == nil {
				failed()
			}
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func eventKey(e publish.Event) string {
	return strconv.FormatBool(e.Warning) + "\x00" + e.Reason + "\x00" + e.Action + "\x00" + e.Note
}

// cutNote cuts a note to events.k8s.io/v1's limit.
func cutNote(note string) string {
	if len(note) > maxNote {
		return note[:maxNote-3] + "..."
	}
	return note
}

// takeTokenLocked takes a token, or says how long until there is one.
func (r *Recorder) takeTokenLocked() (wait time.Duration, ok bool) {
	now := r.now()
	r.tokens = min(EventBurst, r.tokens+now.Sub(r.refilled).Seconds()/EventRefill.Seconds())
	r.refilled = now
	if r.tokens < 1-1e-6 { // a timer due at the refill finds a token, whatever the rounding
		return time.Duration((1 - r.tokens) * float64(EventRefill)), false
	}
	r.tokens = max(0, r.tokens-1)
	return 0, true
}

// failedLocked counts a write that failed, and gives its token back when the failure was the
// API server's absence (nothing was written).
func (r *Recorder) failedLocked(err, explained error) {
	r.stats.Failed++
	r.stats.LastError = explained.Error()
	r.stats.LastErrorAt = r.now()
	if transient(err) {
		r.tokens = min(EventBurst, r.tokens+1)
	}
}

// transient reports whether a write that failed with err may succeed later as it is: the API
// server was not reached, or was overloaded; not a refusal of the Event itself.
func transient(err error) bool {
	return !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsRequestEntityTooLargeError(err))
}

// drain creates the queued events, oldest first, while there are tokens. It returns how long
// until the next token when some still wait, and false when the API server failed a write
// that may succeed later (the events stay queued).
func (r *Recorder) drain(ctx context.Context) (time.Duration, bool) {
	for ctx.Err() == nil {
		r.mu.Lock()
		if len(r.order) == 0 {
			r.dropLogged = false
			r.mu.Unlock()
			return 0, true
		}
		if wait, ok := r.takeTokenLocked(); !ok {
			r.mu.Unlock()
			return wait, true
		}
		key := r.order[0]
		p := r.pending[key]
		e, count, first, last := p.e, p.count, p.first, p.last
		r.mu.Unlock()

		name, written, err := r.create(ctx, e, key, count, first, last)

		r.mu.Lock()
		if err != nil && ctx.Err() != nil {
			r.tokens++
			r.mu.Unlock()
			break
		}
		if err != nil && transient(err) {
			r.failedLocked(err, explain(err, "create", "Event on Node "+r.node, "create and patch of events.events.k8s.io in namespace default, regarding Node "+r.node))
			r.mu.Unlock()
			return 0, false
		}
		r.order = r.order[1:]
		delete(r.pending, key)
		r.pendingBytes -= p.size
		if err != nil {
			r.failedLocked(err, explain(err, "create", "Event on Node "+r.node, "create and patch of events.events.k8s.io in namespace default, regarding Node "+r.node))
		} else {
			r.stats.Recorded += uint64(p.count - p.counted)
			r.series[key] = &series{e: e, name: name, count: written + p.count - count, written: written, lastObserved: p.last}
			r.pruneLocked()
		}
		r.mu.Unlock()
	}
	return 0, true
}

// pruneLocked forgets the series that are quiet and written.
func (r *Recorder) pruneLocked() {
	now := r.now()
	for k, s := range r.series {
		if now.Sub(s.lastObserved) >= SeriesWindow && s.written == s.count {
			delete(r.series, k)
		}
	}
}

// create creates the Event of e, count times between first and last, and returns its name and
// the count its series has now. An Event of that name from an earlier run of the daemon on
// this node (a restart within the Events' hour) grows by count, rather than a second Event
// telling the same.
func (r *Recorder) create(ctx context.Context, e publish.Event, key string, count int, first, last time.Time) (string, int, error) {
	obj := r.event(e, eventName(r.node, key), first)
	if count > 1 {
		obj.Object["series"] = map[string]any{"count": int64(count), "lastObservedTime": last.UTC().Format(microTime)}
	}
	events := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault)
	_, err := events.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	r.answered(err)
	if !apierrors.IsAlreadyExists(err) {
		return obj.GetName(), count, err
	}
	written, err := r.continueSeries(ctx, obj.GetName(), count, last)
	if err == nil || (transient(err) && !errors.Is(err, errNotOurs)) {
		return obj.GetName(), written, err
	}
	// Not ours to continue (another writer took the name): a new Event of its own.
	obj.SetName(fmt.Sprintf("%s.%x", eventNamePrefix(r.node), r.now().UnixNano()))
	_, err = events.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	r.answered(err)
	return obj.GetName(), count, err
}

// event is the events.k8s.io/v1 Event of e, named name, first seen now.
func (r *Recorder) event(e publish.Event, name string, now time.Time) *unstructured.Unstructured {
	typ := "Normal"
	if e.Warning {
		typ = "Warning"
	}
	note := cutNote(e.Note)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata":   map[string]any{"name": name, "namespace": metav1.NamespaceDefault},
		"eventTime":  now.UTC().Format(microTime),
		"regarding": map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": r.node, "uid": r.node,
		},
		"reportingController": ReportingController,
		"reportingInstance":   truncate(ReportingController+"-"+r.node, 128),
		"action":              truncate(e.Action, 128),
		"reason":              truncate(e.Reason, 128),
		"note":                note,
		"type":                typ,
	}}
}

// microTime is the layout of an Event's eventTime and series.lastObservedTime.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// eventName names the Event of key on node: the same for the same Event, so that a daemon
// started again finds the Event its previous run recorded, and different for different ones
// (a hash of the key: reason, action, type and note).
func eventName(node, key string) string {
	sum := sha256.Sum256([]byte(key))
	return eventNamePrefix(node) + "." + hex.EncodeToString(sum[:8])
}

// eventNamePrefix is node, cut so that an Event name made of it stays within the 253
// characters of a DNS subdomain.
func eventNamePrefix(node string) string {
	node = truncate(node, 253-1-16)
	return strings.TrimRight(node, ".-")
}

// errNotOurs: an Event of the name is about something else.
var errNotOurs = errors.New("kube: the Event of that name is not this node's")

// continueSeries adds count to the series of Event name, recorded by an earlier run, and
// returns the count now written. It reads the Event with a patch that changes nothing (the
// Role grants create and patch, not get), then writes its count.
func (r *Recorder) continueSeries(ctx context.Context, name string, count int, last time.Time) (int, error) {
	events := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault)
	cur, err := events.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: FieldManager})
	r.answered(err)
	if err != nil {
		return 0, err
	}
	if reg, _, _ := unstructured.NestedString(cur.Object, "regarding", "name"); reg != r.node {
		return 0, fmt.Errorf("%w: event %s is about %q, not Node %s", errNotOurs, name, reg, r.node)
	}
	total := 1
	if n, ok, _ := unstructured.NestedInt64(cur.Object, "series", "count"); ok && n > 0 {
		total = int(n)
	}
	total += count
	if err := r.patchSeries(ctx, name, total, last); err != nil {
		return 0, err
	}
	return total, nil
}

// patchSeries writes the series of Event name.
func (r *Recorder) patchSeries(ctx context.Context, name string, count int, last time.Time) error {
	patch, _ := json.Marshal(map[string]any{"series": map[string]any{
		"count": count, "lastObservedTime": last.UTC().Format(microTime),
	}})
	_, err := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	r.answered(err)
	return err
}

// answered counts a request the API server answered (done, or refused with a status).
func (r *Recorder) answered(err error) {
	var st apierrors.APIStatus
	if err == nil || errors.As(err, &st) {
		r.mu.Lock()
		r.stats.Requests++
		r.mu.Unlock()
	}
}

// flushSeries writes the counts of the series that grew, while there are tokens (the others
// wait for the next flush). A series whose Event is gone (Events expire) is queued to be
// created again with what it did not write. It returns false when the API server failed a
// write that may succeed later.
func (r *Recorder) flushSeries(ctx context.Context) bool {
	type write struct {
		key   string
		count int
		last  time.Time
		s     *series
	}
	var ws []write
	r.mu.Lock()
	for k, s := range r.series {
		if s.count != s.written {
			ws = append(ws, write{k, s.count, s.lastObserved, s})
		}
	}
	r.pruneLocked()
	r.mu.Unlock()
	slices.SortFunc(ws, func(a, b write) int { return a.last.Compare(b.last) })
	for _, w := range ws {
		r.mu.Lock()
		_, ok := r.takeTokenLocked()
		r.mu.Unlock()
		if !ok {
			return true
		}
		err := r.patchSeries(ctx, w.s.name, w.count, w.last)
		r.mu.Lock()
		switch {
		case err != nil && ctx.Err() != nil:
			r.tokens++
			r.mu.Unlock()
			return true
		case apierrors.IsNotFound(err):
			// Gone (Events expire, or were deleted): what it did not write is an Event again.
			if r.series[w.key] == w.s {
				delete(r.series, w.key)
			}
			if n := w.s.count - w.s.written; n > 0 {
				if p := r.queueLocked(w.s.e, w.key, n, w.s.lastObserved, w.s.lastObserved); p != nil {
					p.counted += n
				}
			}
		case err != nil:
			r.failedLocked(err, explain(err, "patch", "Event "+w.s.name, "patch of events.events.k8s.io in namespace default"))
			if transient(err) {
				r.mu.Unlock()
				return false
			}
			w.s.written = w.count // refused: not tried again
		default:
			w.s.written = w.count
		}
		r.mu.Unlock()
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
