// Package forwardtest is a fake of the kubelet's plugin manager, as far as a registration
// socket is concerned, for the tests of the forwarding to the kubelet (package forward, the
// registrar, the daemon).
package forwardtest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Verdict is how the fake kubelet answers a plugin it found.
type Verdict int

const (
	// Accept registers the plugin and answers NotifyRegistrationStatus(true).
	Accept Verdict = iota
	// Refuse answers NotifyRegistrationStatus(false) with the text given to SetVerdict.
	Refuse
	// Silent asks GetInfo and never answers: a kubelet whose handler hangs.
	Silent
)

// Event kinds.
const (
	Registered   = "register"
	Refused      = "refuse"
	Asked        = "asked" // GetInfo answered; the verdict was Silent
	Deregistered = "deregister"
	Failed       = "failed" // the socket could not be dialled or did not answer GetInfo
)

// Event is one thing the fake kubelet did.
type Event struct {
	Kind   string
	Socket string // the socket in its directory
	Info   *regapi.PluginInfo
	Err    error
	At     time.Time
}

// Kubelet watches a directory as the kubelet's plugin watcher does (fsnotify; names starting
// with '.' and files that are not sockets ignored on create; every removal taken for a socket)
// and, for each socket created there, dials it, asks GetInfo and answers
// NotifyRegistrationStatus as its verdict says. A socket removed after it registered it is a
// DeRegister. It handles one socket at a time, in the order of the events.
type Kubelet struct {
	dir    string
	period time.Duration // 0: at once
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	verdict    Verdict
	text       string
	registered map[string]*regapi.PluginInfo // by socket
	events     []Event
	changed    chan struct{} // closed and replaced at every event
}

// Start starts a fake kubelet on dir, stopped when the test ends.
func Start(t testing.TB, dir string) *Kubelet { return StartPolling(t, dir, 0) }

// StartPolling is Start with the real kubelet's pace: the sockets created are handled once
// every period, all of those found at once (as its reconciler's pass does), instead of the
// moment each appears. Removals are handled at once.
func StartPolling(t testing.TB, dir string, period time.Duration) *Kubelet {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{dir: dir, cancel: cancel, done: make(chan struct{}),
		registered: make(map[string]*regapi.PluginInfo), changed: make(chan struct{})}
	k.period = period
	go k.run(ctx, w)
	t.Cleanup(k.Stop)
	return k
}

// Stop stops the fake kubelet and waits for it. Idempotent.
func (k *Kubelet) Stop() {
	k.cancel()
	<-k.done
}

// SetVerdict sets how the plugins found from now on are answered; text is the reason of
// Refuse.
func (k *Kubelet) SetVerdict(v Verdict, text string) {
	k.mu.Lock()
	k.verdict, k.text = v, text
	k.mu.Unlock()
}

func (k *Kubelet) run(ctx context.Context, w *fsnotify.Watcher) {
	defer close(k.done)
	defer w.Close()
	// The sockets there already, as the kubelet registers them at its start.
	if ents, err := os.ReadDir(k.dir); err == nil {
		for _, e := range ents {
			k.created(ctx, filepath.Join(k.dir, e.Name()))
		}
	}
	var tick <-chan time.Time
	if k.period > 0 {
		t := time.NewTicker(k.period)
		defer t.Stop()
		tick = t.C
	}
	var found []string
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.Events:
			switch {
			case ev.Has(fsnotify.Create) && tick != nil:
				found = append(found, ev.Name)
			case ev.Has(fsnotify.Create):
				k.created(ctx, ev.Name)
			case ev.Has(fsnotify.Remove):
				k.removed(ev.Name)
			}
		case <-tick:
			var wg sync.WaitGroup
			for _, p := range found {
				wg.Go(func() { k.created(ctx, p) })
			}
			wg.Wait()
			found = nil
		case <-w.Errors:
		}
	}
}

// Relist handles every socket of the directory again, as a restarted kubelet does.
func (k *Kubelet) Relist(ctx context.Context) {
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		k.created(ctx, filepath.Join(k.dir, e.Name()))
	}
}

func (k *Kubelet) created(ctx context.Context, path string) {
	if strings.HasPrefix(filepath.Base(path), ".") {
		return
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		return
	}
	k.mu.Lock()
	v, text := k.verdict, k.text
	k.mu.Unlock()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		k.record(Event{Kind: Failed, Socket: path, Err: err})
		return
	}
	defer conn.Close()
	c := regapi.NewRegistrationClient(conn)
	// The kubelet's deadlines: 1 s for GetInfo, 5 s for the notification.
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.GetInfo(ictx, &regapi.InfoRequest{})
	if err != nil {
		k.record(Event{Kind: Failed, Socket: path, Err: err})
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch v {
	case Accept:
		k.mu.Lock()
		k.registered[path] = info
		k.mu.Unlock()
		k.record(Event{Kind: Registered, Socket: path, Info: info})
		_, err = c.NotifyRegistrationStatus(cctx, &regapi.RegistrationStatus{PluginRegistered: true})
	case Refuse:
		k.record(Event{Kind: Refused, Socket: path, Info: info})
		_, err = c.NotifyRegistrationStatus(cctx, &regapi.RegistrationStatus{PluginRegistered: false, Error: text})
	case Silent:
		k.record(Event{Kind: Asked, Socket: path, Info: info})
	}
	if err != nil {
		k.record(Event{Kind: Failed, Socket: path, Info: info, Err: err})
	}
}

func (k *Kubelet) removed(path string) {
	k.mu.Lock()
	info, ok := k.registered[path]
	delete(k.registered, path)
	k.mu.Unlock()
	if ok {
		k.record(Event{Kind: Deregistered, Socket: path, Info: info})
	}
}

func (k *Kubelet) record(e Event) {
	e.At = time.Now()
	k.mu.Lock()
	k.events = append(k.events, e)
	close(k.changed)
	k.changed = make(chan struct{})
	k.mu.Unlock()
}

// Events returns everything the fake kubelet did, in order.
func (k *Kubelet) Events() []Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Event(nil), k.events...)
}

// Registered returns the plugins registered now, by socket.
func (k *Kubelet) Registered() map[string]*regapi.PluginInfo {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]*regapi.PluginInfo, len(k.registered))
	for s, i := range k.registered {
		out[s] = i
	}
	return out
}

// Wait returns the first event from index from on (Events()[from:]) of kind for the plugin
// named name (any plugin when ""), and its index; it fails the test after timeout.
func (k *Kubelet) Wait(t testing.TB, from int, kind, name string, timeout time.Duration) (Event, int) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		k.mu.Lock()
		for i := from; i < len(k.events); i++ {
			e := k.events[i]
			if e.Kind == kind && (name == "" || (e.Info != nil && e.Info.Name == name)) {
				k.mu.Unlock()
				return e, i
			}
		}
		ch := k.changed
		k.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("fake kubelet: no %s event for plugin %q within %s; events: %v", kind, name, timeout, k.Events())
			return Event{}, -1
		}
	}
}

// Count returns how many events of kind there were for the plugin named name.
func (k *Kubelet) Count(kind, name string) int {
	n := 0
	for _, e := range k.Events() {
		if e.Kind == kind && e.Info != nil && e.Info.Name == name {
			n++
		}
	}
	return n
}
