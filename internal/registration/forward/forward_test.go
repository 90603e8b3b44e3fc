package forward_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/forward"
	"github.com/wasmhost/wasmhost/internal/registration/forward/forwardtest"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// wait bounds how long a test waits for an outcome before it fails (never reached when the
// code works).
const wait = 30 * time.Second

type env struct {
	dir, records string
	store        *state.Store
	kubelet      *forwardtest.Kubelet
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	e := &env{dir: filepath.Join(root, "k"), records: filepath.Join(root, "r"), store: state.New()}
	if err := os.Mkdir(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.kubelet = forwardtest.Start(t, e.dir)
	return e
}

func (e *env) forwarder(t *testing.T, timeout time.Duration) *forward.Forwarder {
	t.Helper()
	f, err := forward.New(forward.Config{Dir: e.dir, Types: []string{"CSIPlugin"}, RecordDir: e.records,
		VerdictTimeout: timeout, Status: e.store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func plugin(name string) registration.PluginInfo {
	return registration.PluginInfo{Socket: "/run/wasmhost/" + name + ".sock", Type: "CSIPlugin", Name: name,
		Endpoint: "/var/lib/kubelet/plugins/" + name + "/csi.sock", Versions: []string{"1.0.0"}}
}

// TestAccepted: the kubelet finds the plugin's own answer at a socket named after it, accepts
// it, Await says so and the store shows it; Remove takes the socket (and the record) away and
// the kubelet deregisters the plugin.
func TestAccepted(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	if err := f.Await(t.Context(), p.Socket); err != nil {
		t.Fatalf("Await: %v", err)
	}
	reg, _ := e.kubelet.Wait(t, 0, forwardtest.Registered, p.Name, wait)
	if got := reg.Info; got.Type != p.Type || got.Endpoint != p.Endpoint || strings.Join(got.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("the kubelet was told %+v, want the plugin's own answer %+v", got, p)
	}
	if base := filepath.Base(reg.Socket); !strings.HasPrefix(base, "wasmhost-CSIPlugin-csi.example.com-") || !strings.HasSuffix(base, ".sock") {
		t.Errorf("socket name %s: want wasmhost-CSIPlugin-csi.example.com-<hash>.sock", base)
	}
	fi, err := os.Lstat(reg.Socket)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("the forward socket: %v, mode %v; want a socket of mode 0600", err, fi.Mode())
	}
	k, _ := e.store.KubeletOf(p.Socket)
	if k.State != state.KubeletRegistered || k.Socket != reg.Socket {
		t.Errorf("store: %+v, want registered at %s", k, reg.Socket)
	}
	if recs, _ := os.ReadDir(e.records); len(recs) != 1 {
		t.Errorf("%d records, want 1", len(recs))
	}
	f.Remove(p.Socket)
	e.kubelet.Wait(t, 0, forwardtest.Deregistered, p.Name, wait)
	if _, err := os.Lstat(reg.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the forward socket is still there: %v", err)
	}
	if recs, _ := os.ReadDir(e.records); len(recs) != 0 {
		t.Errorf("%d records after Remove, want none", len(recs))
	}
	if k, ok := e.store.KubeletOf(p.Socket); ok {
		t.Errorf("store still shows %+v after Remove", k)
	}
}

// TestRefused: the kubelet's own text comes back as a KubeletError, and stays shown after the
// socket is removed.
func TestRefused(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	const text = "validation failed for CSI Driver csi.example.com at endpoint /x: highest supported version is 0.3.0"
	e.kubelet.SetVerdict(forwardtest.Refuse, text)
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	err := f.Await(t.Context(), p.Socket)
	var ke *registration.KubeletError
	if !errors.As(err, &ke) || !errors.Is(err, registration.ErrKubeletRefused) || err.Error() != "kubelet: "+text {
		t.Fatalf("Await: %v, want a KubeletError %q", err, "kubelet: "+text)
	}
	f.Remove(p.Socket)
	if k, _ := e.store.KubeletOf(p.Socket); k.State != state.KubeletRefused || k.Error != text {
		t.Errorf("store: %+v, want refused with the kubelet's text", k)
	}
}

// TestSilentKubelet: a kubelet that asks GetInfo and never answers is a timeout, not a hang;
// the error names the wait and the directory.
func TestSilentKubelet(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 100*time.Millisecond)
	e.kubelet.SetVerdict(forwardtest.Silent, "")
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	err := f.Await(t.Context(), p.Socket)
	if !errors.Is(err, registration.ErrKubeletTimeout) || !strings.Contains(err.Error(), "100ms") || !strings.Contains(err.Error(), e.dir) {
		t.Fatalf("Await: %v, want a timeout naming 100ms and %s", err, e.dir)
	}
	if k, _ := e.store.KubeletOf(p.Socket); k.State != state.KubeletTimeout {
		t.Errorf("store: %+v, want timeout", k)
	}
}

// TestLaterRefusalShown: a kubelet that re-lists its directory (it restarted) and refuses a
// plugin it accepted before: the refusal is recorded and shown; the socket stays.
func TestLaterRefusalShown(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	if err := f.Await(t.Context(), p.Socket); err != nil {
		t.Fatal(err)
	}
	e.kubelet.SetVerdict(forwardtest.Refuse, "driver name taken")
	e.kubelet.Relist(t.Context())
	if k, _ := e.store.KubeletOf(p.Socket); k.State != state.KubeletRefused || k.Error != "driver name taken" {
		t.Errorf("store: %+v, want refused: driver name taken", k)
	}
	if _, ok := f.Socket(p.Socket); !ok {
		t.Error("the socket was taken away on a later refusal")
	}
}

// TestRestartRemovesOnlyItsOwn: sockets a closed forwarder left are removed by the next one's
// New (the kubelet deregisters their plugins), while a socket wasmhost did not make stays: one
// planted beside them, and one put at the path of a recorded socket after it was removed.
func TestRestartRemovesOnlyItsOwn(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	a, b := plugin("a.example.com"), plugin("b.example.com")
	for _, p := range []registration.PluginInfo{a, b} {
		if err := f.Open(p); err != nil {
			t.Fatal(err)
		}
		if err := f.Await(t.Context(), p.Socket); err != nil {
			t.Fatal(err)
		}
	}
	pathB, _ := f.Socket(b.Socket)
	f.Close()
	if _, err := os.Lstat(pathB); err != nil {
		t.Fatalf("Close removed the socket the kubelet knows the plugin by: %v", err)
	}
	foreign := listen(t, filepath.Join(e.dir, "other-reg.sock"))
	// b's socket is replaced by one wasmhost did not make, at the same path (made while b's
	// was there, so another inode; renamed over it).
	other := listen(t, filepath.Join(e.dir, ".other"))
	if err := os.Rename(other, pathB); err != nil {
		t.Fatal(err)
	}
	replaced := pathB

	e.forwarder(t, 0)
	e.kubelet.Wait(t, 0, forwardtest.Deregistered, a.Name, wait)
	for _, p := range []string{foreign, replaced} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("a socket wasmhost did not make was touched: %s: %v", p, err)
		}
	}
	if recs, _ := os.ReadDir(e.records); len(recs) != 0 {
		t.Errorf("%d records left after the start, want none", len(recs))
	}
	ents, _ := os.ReadDir(e.dir)
	if len(ents) != 2 {
		t.Errorf("the kubelet's directory holds %d files, want the 2 wasmhost did not make: %v", len(ents), ents)
	}
}

// TestForeignFileInTheWay: a file wasmhost did not make at the socket's name is left alone,
// and Open says so.
func TestForeignFileInTheWay(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	path, _ := f.Socket(p.Socket)
	f.Remove(p.Socket)
	listen(t, path)
	err := f.Open(p)
	if !errors.Is(err, registration.ErrForward) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open with a foreign socket in the way: %v, want ErrForward naming %s", err, path)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("the foreign socket was touched: %v", err)
	}
	ents, _ := os.ReadDir(e.dir)
	if len(ents) != 1 {
		t.Errorf("the directory holds %v, want the foreign socket alone (no temporary left)", ents)
	}
}

// TestSocketNames: names are readable, made safe, unique per plugin socket, the same for the
// same plugin, and fit a socket path.
func TestSocketNames(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, time.Nanosecond)
	long := strings.Repeat("x", 200)
	cases := []registration.PluginInfo{
		plugin("csi.example.com"),
		{Socket: "/run/a.sock", Type: "DRAPlugin", Name: "gpu/../../é" + long, Versions: []string{"v1.DRAPlugin"}},
		{Socket: "/run/b.sock", Type: "DRAPlugin", Name: "gpu/../../é" + long, Versions: []string{"v1.DRAPlugin"}},
	}
	seen := map[string]bool{}
	for _, p := range cases {
		if err := f.Open(p); err != nil {
			t.Fatal(err)
		}
		path, _ := f.Socket(p.Socket)
		base := filepath.Base(path)
		if len(path) > 107 || strings.ContainsAny(base, "/é") || strings.HasPrefix(base, ".") || seen[base] {
			t.Errorf("socket %s (%d bytes) for %q", path, len(path), p.Name)
		}
		seen[base] = true
		f.Remove(p.Socket)
		if err := f.Open(p); err != nil {
			t.Fatal(err)
		}
		if again, _ := f.Socket(p.Socket); again != path {
			t.Errorf("the same plugin got %s, then %s", path, again)
		}
		f.Remove(p.Socket)
	}
}

// listen leaves a socket wasmhost did not make at path: a dead one (its listener closed,
// its file kept), as a killed plugin leaves, which the fake kubelet fails to dial at once.
func listen(t *testing.T, path string) string {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	return path
}

// TestRemovedByOthersMadeAgain: a forward socket someone else removes (a clean-up script, an
// operator) makes the kubelet deregister the plugin; the forwarder makes it again at once, at
// the same path, and the kubelet registers the plugin again, while it stays registered with
// wasmhost. Remove then takes the new one away.
func TestRemovedByOthersMadeAgain(t *testing.T) {
	e := newEnv(t)
	f := e.forwarder(t, 0)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()
	p := plugin("csi.example.com")
	if err := f.Open(p); err != nil {
		t.Fatal(err)
	}
	if err := f.Await(t.Context(), p.Socket); err != nil {
		t.Fatalf("Await: %v", err)
	}
	reg, i := e.kubelet.Wait(t, 0, forwardtest.Registered, p.Name, wait)
	if err := os.Remove(reg.Socket); err != nil {
		t.Fatal(err)
	}
	_, i = e.kubelet.Wait(t, i, forwardtest.Deregistered, p.Name, wait)
	again, _ := e.kubelet.Wait(t, i, forwardtest.Registered, p.Name, wait)
	if again.Socket != reg.Socket || again.Info.Endpoint != p.Endpoint {
		t.Errorf("registered again at %s with %+v, want %s with the plugin's own answer", again.Socket, again.Info, reg.Socket)
	}
	testwait.Until(t, "the store to show the plugin registered with the kubelet again", func() bool {
		k, _ := e.store.KubeletOf(p.Socket)
		return k.State == state.KubeletRegistered && k.Socket == reg.Socket
	})
	if recs, _ := os.ReadDir(e.records); len(recs) != 1 {
		t.Errorf("%d records, want 1", len(recs))
	}
	f.Remove(p.Socket)
	if _, err := os.Lstat(reg.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the forward socket made again is still there after Remove: %v", err)
	}
	if recs, _ := os.ReadDir(e.records); len(recs) != 0 {
		t.Errorf("%d records after Remove, want none", len(recs))
	}
}
