// Package forward puts wasmhost in front of the kubelet. For a plugin of a forwarded type
// that its handler admitted, it makes a registration socket in the kubelet's plugin
// directory (forward.kubeletDir) that answers the kubelet's GetInfo with the plugin's own
// answer, and waits there for the kubelet's NotifyRegistrationStatus: the registrar tells the
// plugin it is registered only once the kubelet accepted it too. When the plugin leaves
// wasmhost (its socket gone, its server dead, its handler removed), the socket goes, and the
// kubelet deregisters it. RATIONALE: docs/forward.md.
//
// Every socket made is recorded (Config.RecordDir) with its device and inode: a later start
// removes those an earlier run left, and never a file it did not make.
//
// This package is part of the daemon, not a stable API.
package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/safetext"
	"github.com/wasmhost/wasmhost/internal/state"
)

// VerdictTimeout is how long a forwarded registration waits for the kubelet's
// NotifyRegistrationStatus before it is rolled back (state.KubeletTimeout) and retried with
// backoff. The kubelet looks at its directory once a second, then dials (up to 10 s), asks
// GetInfo and runs its handler (the CSI one calls the driver's NodeGetInfo and updates the
// CSINode object) before it answers; and a socket path it failed before waits out its backoff
// for that path, up to 2m2s, before it tries it again. The wait holds no handler slot: only
// the plugin's connection and a goroutine.
const VerdictTimeout = 2*time.Minute + 30*time.Second

// maxKubeletText bounds the kubelet's reason kept, shown and sent on to the plugin, in bytes;
// the rest is cut (safetext.Cut says how much).
const maxKubeletText = 1024

// maxMessage bounds a message the kubelet sends on a forward socket, in bytes (its
// RegistrationStatus is a flag and a reason).
const maxMessage = 16 << 10

// Sentinel errors.
var (
	// ErrClosed: the forwarder was closed (the daemon is stopping).
	ErrClosed = errors.New("forward: closed")
	// ErrNotOpen: no socket was made for the plugin.
	ErrNotOpen = errors.New("forward: no forward socket for the plugin")
)

// Config configures a Forwarder.
type Config struct {
	// Dir is the kubelet's plugin registration directory (forward.kubeletDir). Required.
	Dir string
	// Types are the plugin types forwarded (forward.types).
	Types []string
	// RecordDir is where every socket made is recorded (<stateDir>/forward); made 0700 when
	// missing. Required.
	RecordDir string
	// VerdictTimeout bounds the wait for the kubelet's verdict. Defaults to VerdictTimeout.
	VerdictTimeout time.Duration
	// Status is told every plugin's standing with the kubelet, by its registration socket;
	// *state.Store implements it. Defaults to nil: nobody is told.
	Status Status
	// Logger; nil discards. Lines carry plugin_type, plugin, socket (the plugin's) and
	// forward_socket.
	Logger *slog.Logger
	// Now tells the time for Kubelet.Since. Defaults to time.Now.
	Now func() time.Time
}

// Status is where the plugins' standing with the kubelet is recorded. It is called with the
// forwarder's lock held: it must not call the forwarder.
type Status interface {
	SetKubelet(path string, k state.Kubelet)
}

// Forwarder makes, serves and removes the sockets that present plugins to the kubelet. Its
// methods are safe for concurrent use; at most one Open, Await or Remove at a time per plugin
// socket (the reconciler runs one operation at a time per socket).
type Forwarder struct {
	cfg   Config
	log   *slog.Logger
	types map[string]bool
	srv   *grpc.Server

	mu       sync.Mutex
	closed   bool
	byPlugin map[string]*entry // by the plugin's registration socket
	byAddr   map[string]*entry // by the address the forward socket was bound at
	serving  sync.WaitGroup
	stopOnce sync.Once
	done     chan struct{} // closed by Close
}

// entry is one plugin presented to the kubelet.
type entry struct {
	info     registration.PluginInfo
	path     string // the socket's final path in Dir
	bound    string // the temporary path it was bound at (its address)
	dev, ino uint64
	ctime    int64 // once renamed into place; 0 before
	placed   bool  // renamed into place (guarded by Forwarder.mu): restore may make it again
	lis      *net.UnixListener
	answered chan struct{} // closed at the kubelet's first NotifyRegistrationStatus

	// Guarded by Forwarder.mu.
	first    *verdict // the kubelet's first answer
	kubelet  state.Kubelet
	notifies int
}

type verdict struct {
	registered bool
	text       string
}

// New returns a Forwarder for cfg. It removes the sockets an earlier run recorded that are
// still the files it made (their records too) before it returns.
func New(cfg Config) (*Forwarder, error) {
	if cfg.Dir == "" || cfg.RecordDir == "" {
		return nil, errors.New("forward: Config.Dir and Config.RecordDir are required")
	}
	if cfg.VerdictTimeout <= 0 {
		cfg.VerdictTimeout = VerdictTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Forwarder{
		cfg:      cfg,
		log:      log,
		types:    make(map[string]bool),
		byPlugin: make(map[string]*entry),
		byAddr:   make(map[string]*entry),
		done:     make(chan struct{}),
	}
	for _, t := range cfg.Types {
		f.types[t] = true
	}
	if err := os.MkdirAll(cfg.RecordDir, 0o700); err != nil {
		return nil, fmt.Errorf("forward: the directory of records %s: %w", cfg.RecordDir, err)
	}
	n, err := f.cleanStale()
	if err != nil {
		return nil, err
	}
	if n > 0 {
		log.Info("forward sockets of an earlier run removed", "removed", n, "kubelet_dir", cfg.Dir)
	}
	if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
		// Not fatal: the kubelet makes it when it starts. Until then forwarded plugins fail,
		// each naming it, and are retried with backoff.
		log.Warn("the kubelet's plugin directory (forward.kubeletDir) is not there: forwarded plugins cannot reach the kubelet until it is", "kubelet_dir", cfg.Dir, "error", err)
	}
	f.srv = grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage), grpc.MaxConcurrentStreams(16))
	regapi.RegisterRegistrationServer(f.srv, service{f: f})
	return f, nil
}

// Forwards reports whether plugins of pluginType are presented to the kubelet.
func (f *Forwarder) Forwards(pluginType string) bool { return f.types[pluginType] }

// Dir is the kubelet's directory.
func (f *Forwarder) Dir() string { return f.cfg.Dir }

// Run serves until ctx is done, then closes the forwarder (Close). Meanwhile it watches the
// kubelet's directory and makes again a forward socket that someone else removed (restore.go).
func (f *Forwarder) Run(ctx context.Context) error {
	f.watch(ctx)
	f.Close()
	return nil
}

// Close stops serving every socket and returns once their goroutines have ended. The socket
// files stay, with their records: the kubelet keeps the plugins it registered while the daemon
// is away, and the next start removes them (docs/forward.md says why). Idempotent.
func (f *Forwarder) Close() {
	f.stopOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		close(f.done)
		f.mu.Unlock()
		f.srv.Stop()
		f.serving.Wait()
	})
}

// Open presents the plugin p (as its handler admitted it; p.Endpoint is already the
// plugin's registration socket when it gave none) to the kubelet: it makes the socket that
// answers GetInfo for it in the kubelet's directory. The error wraps registration.ErrForward
// and names the socket.
func (f *Forwarder) Open(p registration.PluginInfo) error {
	f.Remove(p.Socket) // an earlier one (there should be none)
	name := socketName(f.cfg.Dir, p.Socket, p.Type, p.Name)
	e := &entry{
		info:     p,
		path:     filepath.Join(f.cfg.Dir, name),
		bound:    filepath.Join(f.cfg.Dir, tempName(name)),
		answered: make(chan struct{}),
	}
	e.info.Versions = slices.Clone(p.Versions)
	fail := func(err error) error {
		return fmt.Errorf("%w: plugin %s (type %s) at socket %s: forward socket %s: %w", registration.ErrForward, p.Name, p.Type, p.Socket, e.path, err)
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.bound, Net: "unix"})
	if err != nil {
		return fail(err)
	}
	lis.SetUnlinkOnClose(false)
	e.lis = lis
	undo := func(err error) error {
		lis.Close()
		os.Remove(e.bound)
		f.removeRecord(e.path)
		return fail(err)
	}
	if err := os.Chmod(e.bound, 0o600); err != nil {
		return undo(err)
	}
	id, err := identity(e.bound)
	if err != nil || !id.socket {
		return undo(fmt.Errorf("the socket bound at %s is not there as bound: %v", e.bound, err))
	}
	e.dev, e.ino = id.dev, id.ino
	if err := f.writeRecord(record{Path: e.path, Temp: e.bound, Dev: e.dev, Ino: e.ino}); err != nil {
		return undo(err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return undo(ErrClosed)
	}
	f.byPlugin[p.Socket] = e
	f.byAddr[e.bound] = e
	e.kubelet = state.Kubelet{State: state.KubeletPending, Socket: e.path, Since: f.cfg.Now()}
	f.setStatus(p.Socket, e.kubelet) // before the kubelet can see it, and answer
	f.serving.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.serving.Done()
		_ = f.srv.Serve(lis) // returns when the listener is closed
	}()
	// The kubelet sees it from here: it listens already, with its mode set.
	if err := renameNoReplace(e.bound, e.path); err != nil {
		f.mu.Lock()
		delete(f.byPlugin, p.Socket)
		delete(f.byAddr, e.bound)
		f.setStatus(p.Socket, state.Kubelet{})
		f.mu.Unlock()
		if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("a file wasmhost did not make is in the way; it is left alone (remove it if nothing uses it): %w", err)
		}
		return undo(err)
	}
	f.mu.Lock()
	if id, err := identity(e.path); err == nil && id.dev == e.dev && id.ino == e.ino {
		e.ctime = id.ctime // rename set it; Remove checks it
	}
	e.placed = true
	f.mu.Unlock()
	f.log.Debug("plugin presented to the kubelet", "plugin_type", p.Type, "plugin", p.Name, "socket", p.Socket, "forward_socket", e.path)
	return nil
}

// Await waits for the kubelet's first verdict on the socket Open made for the plugin at
// pluginSocket: nil when it accepted the plugin; a *registration.KubeletError when it refused
// (with its text) or did not answer within Config.VerdictTimeout; ctx's error or ErrClosed
// when the wait was cut short.
func (f *Forwarder) Await(ctx context.Context, pluginSocket string) error {
	f.mu.Lock()
	e := f.byPlugin[pluginSocket]
	f.mu.Unlock()
	if e == nil {
		return fmt.Errorf("%w: socket %s", ErrNotOpen, pluginSocket)
	}
	t := time.NewTimer(f.cfg.VerdictTimeout)
	defer t.Stop()
	select {
	case <-e.answered:
	case <-t.C:
		text := fmt.Sprintf("no NotifyRegistrationStatus within %s on %s: is the kubelet running, and is forward.kubeletDir (%s) its plugins_registry?", f.cfg.VerdictTimeout, e.path, f.cfg.Dir)
		f.mu.Lock()
		answered := e.first != nil
		if !answered {
			e.kubelet = state.Kubelet{State: state.KubeletTimeout, Error: text, Socket: e.path, Since: f.cfg.Now()}
			f.setStatus(pluginSocket, e.kubelet)
		}
		f.mu.Unlock()
		if !answered {
			return &registration.KubeletError{Timeout: true, Text: text}
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-f.done:
		return ErrClosed
	}
	f.mu.Lock()
	v := *e.first
	f.mu.Unlock()
	if !v.registered {
		return &registration.KubeletError{Text: v.text}
	}
	return nil
}

// Remove removes the socket made for the plugin at pluginSocket, if any, so that the kubelet
// deregisters the plugin: the file goes only if it is still the one made. The plugin's
// standing with the kubelet is forgotten, unless it says why the kubelet did not take it
// (refused, timeout), which stays shown until the plugin's next attempt.
func (f *Forwarder) Remove(pluginSocket string) {
	f.mu.Lock()
	e := f.byPlugin[pluginSocket]
	var lis *net.UnixListener
	var dev, ino uint64
	var ctime int64
	if e != nil {
		delete(f.byPlugin, pluginSocket)
		delete(f.byAddr, e.bound)
		lis, dev, ino, ctime = e.lis, e.dev, e.ino, e.ctime // restore changes them under the lock
	}
	f.mu.Unlock()
	if e == nil {
		return
	}
	lis.Close()
	log := f.log.With("plugin_type", e.info.Type, "plugin", e.info.Name, "socket", pluginSocket, "forward_socket", e.path)
	if ok, err := removeIfSame(e.path, dev, ino, ctime); err != nil {
		log.Warn("could not remove the forward socket; the kubelet keeps the plugin registered", "error", err)
	} else if !ok {
		log.Warn("the forward socket was not there any more, or was replaced by a file wasmhost did not make (left alone)")
	} else {
		log.Debug("forward socket removed; the kubelet deregisters the plugin")
	}
	f.removeRecord(e.path)
	f.mu.Lock()
	if k := e.kubelet.State; k == state.KubeletPending || k == state.KubeletRegistered {
		f.setStatus(pluginSocket, state.Kubelet{})
	}
	f.mu.Unlock()
}

// Socket returns the path of the socket made for the plugin at pluginSocket.
func (f *Forwarder) Socket(pluginSocket string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byPlugin[pluginSocket]; e != nil {
		return e.path, true
	}
	return "", false
}

func (f *Forwarder) setStatus(pluginSocket string, k state.Kubelet) {
	if f.cfg.Status != nil {
		f.cfg.Status.SetKubelet(pluginSocket, k)
	}
}

// notified records what the kubelet answered on the socket bound at addr.
func (f *Forwarder) notified(addr string, registered bool, text string) error {
	text = safetext.Cut(strings.ToValidUTF8(text, "\uFFFD"), maxKubeletText)
	f.mu.Lock()
	e := f.byAddr[addr]
	if e == nil {
		f.mu.Unlock()
		return fmt.Errorf("forward: no plugin is presented at %s any more", addr)
	}
	k := state.Kubelet{State: state.KubeletRegistered, Socket: e.path, Since: f.cfg.Now()}
	if !registered {
		k.State, k.Error = state.KubeletRefused, text
	}
	if e.kubelet.State == k.State && e.kubelet.Error == k.Error {
		k.Since = e.kubelet.Since
	}
	later := e.first != nil
	e.kubelet = k
	e.notifies++
	info := e.info
	// Under the lock, so that the store says what the kubelet said last, and says it
	// before Await returns.
	f.setStatus(info.Socket, k)
	if !later {
		e.first = &verdict{registered: registered, text: text}
		close(e.answered)
	}
	f.mu.Unlock()
	log := f.log.With("plugin_type", info.Type, "plugin", info.Name, "socket", info.Socket, "forward_socket", e.path)
	switch {
	case later && !registered:
		log.Warn("the kubelet refused a plugin it was told of before; it stays registered with wasmhost", "reason", text)
	case later:
		log.Debug("the kubelet registered the plugin again")
	case registered:
		log.Debug("the kubelet registered the plugin")
	default:
		log.Debug("the kubelet refused the plugin", "reason", text)
	}
	return nil
}

// infoAt returns the plugin presented on the socket bound at addr.
func (f *Forwarder) infoAt(addr string) (registration.PluginInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byAddr[addr]
	if e == nil {
		return registration.PluginInfo{}, false
	}
	return e.info, true
}
