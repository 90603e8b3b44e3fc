package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
)

// fakeAPI stands in for the API server where test/kube's real one is not built: it keeps the
// NodeFeature objects and the Events the daemon writes, and refuses what the real one would
// for its size: a body over 3 MiB (413), an object over etcd's 1.5 MiB request (500).
type fakeAPI struct {
	mu       sync.Mutex
	objects  map[string][]byte // NodeFeatures by name, as last written
	rv       int
	events   []map[string]any          // Events as created, with their series as patched
	byName   map[string]map[string]any // the same, by name
	evWrites int                       // requests about Events (creates and patches)
	refusals int                       // writes refused for their size
}

const (
	fakeBodyLimit = 3 << 20
	fakeEtcdLimit = 3 << 19 // 1.5 MiB
	fakeNFBase    = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/wasmhost/nodefeatures"
	fakeEventBase = "/apis/events.k8s.io/v1/namespaces/default/events"
)

func (s *fakeAPI) status(w http.ResponseWriter, code int, reason, name, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
		"code": code, "message": msg, "details": map[string]any{"name": name, "group": "nfd.k8s-sigs.io", "kind": "nodefeatures"}})
}

func (s *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, fakeBodyLimit+1))
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(body) > fakeBodyLimit {
		s.refusals++
		s.status(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "", "the request body is too large")
		return
	}
	var obj map[string]any
	_ = json.Unmarshal(body, &obj)
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, fakeEventBase):
		s.event(w, r.Method, strings.TrimPrefix(strings.TrimPrefix(path, fakeEventBase), "/"), obj)
	case strings.HasPrefix(path, fakeNFBase):
		name := strings.TrimPrefix(strings.TrimPrefix(path, fakeNFBase), "/")
		if r.Method == http.MethodPost {
			name, _ = obj["metadata"].(map[string]any)["name"].(string)
		}
		stored, exists := s.objects[name]
		switch r.Method {
		case http.MethodGet:
			if !exists {
				s.status(w, http.StatusNotFound, "NotFound", name, "nodefeatures "+name+" not found")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(stored)
			return
		case http.MethodPost, http.MethodPut:
			if len(body) > fakeEtcdLimit {
				s.refusals++
				s.status(w, http.StatusInternalServerError, "InternalError", name, "etcdserver: request is too large")
				return
			}
			if r.Method == http.MethodPost && exists {
				s.status(w, http.StatusConflict, "AlreadyExists", name, "already exists")
				return
			}
			s.rv++
			obj["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(s.rv)
			b, _ := json.Marshal(obj)
			s.objects[name] = b
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// event serves a create (POST) or a merge patch of the series (PATCH) of an Event, as the
// API server does: a name taken is AlreadyExists, a name unknown NotFound.
func (s *fakeAPI) event(w http.ResponseWriter, method, name string, obj map[string]any) {
	s.evWrites++
	if s.byName == nil {
		s.byName = map[string]map[string]any{}
	}
	switch method {
	case http.MethodPost:
		name, _ = obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := s.byName[name]; ok {
			s.status(w, http.StatusConflict, "AlreadyExists", name, "events "+name+" already exists")
			return
		}
		s.events = append(s.events, obj)
		s.byName[name] = obj
	case http.MethodPatch:
		e, ok := s.byName[name]
		if !ok {
			s.status(w, http.StatusNotFound, "NotFound", name, "events "+name+" not found")
			return
		}
		if series, ok := obj["series"]; ok {
			e["series"] = series
		}
		obj = e
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// eventSeries returns, for the Events of reason, their notes and series counts (1 for an
// Event without a series), and how many requests about Events were made.
func (s *fakeAPI) eventSeries(reason string) (notes []string, counts []int, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e["reason"] != reason {
			continue
		}
		notes = append(notes, fmt.Sprint(e["note"]))
		n := 1
		if series, ok := e["series"].(map[string]any); ok {
			c, _ := series["count"].(float64)
			n = int(c)
		}
		counts = append(counts, n)
	}
	return notes, counts, s.evWrites
}

// nodeFeature returns what the object of node holds, and its size in bytes.
func (s *fakeAPI) nodeFeature(node string) (publish.Node, int, bool) {
	s.mu.Lock()
	b, ok := s.objects[node]
	s.mu.Unlock()
	if !ok {
		return publish.Empty(), 0, false
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(b); err != nil {
		return publish.Empty(), len(b), false
	}
	return kube.FromNodeFeature(&u), len(b), true
}

// eventNotes returns the notes of the Events of reason recorded.
func (s *fakeAPI) eventNotes(reason string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e["reason"] == reason {
			out = append(out, fmt.Sprint(e["note"]))
		}
	}
	return out
}

// startFakeAPI starts a fakeAPI for the test and returns it with a kubeconfig file for it.
func startFakeAPI(t *testing.T, dir string) (*fakeAPI, string) {
	t.Helper()
	api := &fakeAPI{objects: map[string][]byte{}}
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	doc := "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: " + ts.URL +
		"\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {}\n"
	if err := os.WriteFile(kubeconfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return api, kubeconfig
}
