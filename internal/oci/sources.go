package oci

// Sources keeps the modules of handlers.sources on disk, pulled, verified and admitted by the
// signature policy, and writes each into a directory the host follows as it follows the
// handler directory: an update is a file replaced (the old revision serves until the new one
// loads), a source taken out of the configuration is a file removed.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/tracing"
)

// ErrPolicy: a module was refused by the signature policy (unsigned, signed by no configured
// key, or by a key that may not sign handlers of a plugin type it declares).
var ErrPolicy = errors.New("oci: refused by the signature policy")

// SourcesConfig configures Sources.
type SourcesConfig struct {
	// Refs are the references to serve (handlers.sources), at most one per repository.
	Refs []string
	// Dir is where admitted modules are written for the host to load (<stateDir>/handlers-oci).
	// Sources owns it: a .wasm file there that no source names is removed.
	Dir string
	// StoreDir keeps what was pulled: modules by sha256, their signatures, and the index of
	// which revision each repository serves (<stateDir>/oci). A module read back from it is
	// checked against its sha256 and discarded if it does not match.
	StoreDir string
	// Keys are the public keys trusted, each for the plugin types it may sign.
	Keys []Key
	// AllowUnsigned are the plugin types whose handlers may be unsigned (or signed by no
	// configured key).
	AllowUnsigned []string
	// PluginTypes returns the plugin types a module declares (the host's inspection).
	PluginTypes func(ctx context.Context, name string, bin []byte) ([]string, error)
	// Remote is how registries are reached.
	Remote Options
	// Retry is the first delay before pulling again after a registry could not be reached;
	// it doubles up to 5 minutes, each wait shortened by a random part of at most half.
	// Defaults to 10 s.
	Retry time.Duration
	// PullTimeout bounds each attempt at one source (its manifest, layer and signatures).
	// Defaults to 30 s.
	PullTimeout time.Duration
	// MaxParallel bounds the sources pulled at once. Defaults to 4.
	MaxParallel int
	// Logger defaults to discarding.
	Logger *slog.Logger
	// OnChange is called after a source's status changed. Defaults to nil.
	OnChange func()
	// Tracer, if set, traces each pull of a source (a trace of its own) and its signature
	// check (internal/tracing). Defaults to nil: none.
	Tracer trace.Tracer
}

// SourceStatus is what one source serves, and why not when it does not.
type SourceStatus struct {
	Ref          string    // as configured
	Pinned       string    // repository@sha256:… of the revision serving, or ""
	File         string    // the file written for the host
	ModuleSHA256 string    // of the module serving
	Layout       string    // Layout* of the revision serving
	SignedBy     []string  // the keys that signed it (none: admitted as unsigned)
	Error        string    // why the configured revision does not serve (yet), or ""
	Reason       string    // the class of Error (Reason*), or ""
	Refused      bool      // Error refuses the configured revision: it is not tried again by itself
	ErrorAt      time.Time // when
}

// Sources pulls and serves handlers.sources. Prepare, then Run.
type Sources struct {
	cfg SourcesConfig
	log *slog.Logger

	mu     sync.Mutex
	status map[string]*SourceStatus // by repository
	idxMu  sync.Mutex               // the pulls of one pass write idx at once
	idx    map[string]indexEntry    // by repository
	todo   map[string]string        // repository → ref still to pull; Run's goroutine only
	byRepo map[string]string        // repository → ref as configured
	kick   chan chan struct{}       // PullNow → Run
	ended  chan struct{}            // closed when Run returns

	synced     chan struct{} // closed after Run's first pass over what was to pull
	syncedOnce sync.Once
}

// indexEntry is the revision a repository serves, kept in StoreDir/index.json.
type indexEntry struct {
	Ref          string    `json:"ref"`
	Pinned       string    `json:"pinned"`
	ModuleSHA256 string    `json:"moduleSHA256"`
	Layout       string    `json:"layout"`
	PulledAt     time.Time `json:"pulledAt"`
}

// The defaults of SourcesConfig: the one place they are written (config.Default takes them).
const (
	DefaultRetry       = 10 * time.Second
	DefaultPullTimeout = 30 * time.Second
	DefaultMaxParallel = 4
)

// NewSources checks cfg.
func NewSources(cfg SourcesConfig) (*Sources, error) {
	if cfg.Dir == "" || cfg.StoreDir == "" || cfg.PluginTypes == nil {
		return nil, errors.New("oci: SourcesConfig needs Dir, StoreDir and PluginTypes")
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = DefaultPullTimeout
	}
	if cfg.MaxParallel <= 0 {
		cfg.MaxParallel = DefaultMaxParallel
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sources{cfg: cfg, log: cfg.Logger, status: map[string]*SourceStatus{}, idx: map[string]indexEntry{},
		todo: map[string]string{}, byRepo: map[string]string{}, synced: make(chan struct{}), kick: make(chan chan struct{}), ended: make(chan struct{})}
	for _, ref := range cfg.Refs {
		r, err := ParseReference(ref)
		if err != nil {
			return nil, err
		}
		repo := r.Context().String()
		if other, dup := s.byRepo[repo]; dup {
			return nil, fmt.Errorf("oci: sources %s and %s name one repository: serve one revision of a handler", other, ref)
		}
		s.byRepo[repo] = ref
		s.status[repo] = &SourceStatus{Ref: ref, File: filepath.Join(cfg.Dir, FileName(r.Context()))}
	}
	return s, nil
}

// FileName is the name of the file a repository's module is written to: the repository's last
// element and a short hash of its full name, so that two repositories never share a file and a
// new revision replaces the old one.
func FileName(repo name.Repository) string {
	base := strings.ToLower(filepath.Base(repo.RepositoryStr()))
	base = unsafeName.ReplaceAllString(base, "_")
	sum := sha256.Sum256([]byte(repo.String()))
	return base + "-" + hex.EncodeToString(sum[:4]) + ".wasm"
}

var unsafeName = regexp.MustCompile(`[^a-z0-9._-]`)

// Prepare serves, without the network, what was pulled before: for every source, the revision
// the store holds for its repository is checked (its sha256, the signature policy as
// configured now) and written to Dir; sources still to pull are left for Run. Files in Dir that
// no source names are removed. Call it before the host follows Dir.
func (s *Sources) Prepare(ctx context.Context) error {
	for _, d := range []string{s.cfg.Dir, s.cfg.StoreDir, filepath.Join(s.cfg.StoreDir, "modules"), filepath.Join(s.cfg.StoreDir, "signatures")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
	}
	if b, err := os.ReadFile(s.indexPath()); err == nil {
		if err := json.Unmarshal(b, &s.idx); err != nil {
			s.log.Error("index of pulled handlers unreadable; pulling again", "file", s.indexPath(), "error", err)
			s.idx = map[string]indexEntry{}
		}
	}
	keep := map[string]bool{}
	for repo, ref := range s.byRepo {
		st := s.status[repo]
		keep[filepath.Base(st.File)] = true
		e, ok := s.idx[repo]
		current := ok && e.Ref == ref // a tag is resolved once: its pin is kept
		if ok {
			if err := s.serveStored(ctx, repo, e); err != nil {
				s.log.Error("stored handler revision not served", "source", ref, "pinned", e.Pinned, "error", err)
				s.setError(repo, err)
				current = false
				_ = os.Remove(st.File)
			}
		} else {
			_ = os.Remove(st.File)
		}
		if !current {
			s.todo[repo] = ref
		}
	}
	entries, _ := os.ReadDir(s.cfg.Dir)
	for _, de := range entries {
		if n := de.Name(); !keep[n] {
			_ = os.RemoveAll(filepath.Join(s.cfg.Dir, n))
			s.log.Info("handler source removed from the configuration; its module goes", "file", n)
		}
	}
	for repo := range s.idx {
		if _, ok := s.byRepo[repo]; !ok {
			delete(s.idx, repo)
		}
	}
	return s.saveIndex()
}

// serveStored checks the stored revision e of repo and writes it for the host.
func (s *Sources) serveStored(ctx context.Context, repo string, e indexEntry) error {
	bin, err := os.ReadFile(s.modulePath(e.ModuleSHA256))
	if err != nil {
		return fmt.Errorf("stored module: %w", err)
	}
	if got := sha256hex(bin); got != e.ModuleSHA256 {
		_ = os.Remove(s.modulePath(e.ModuleSHA256))
		return fmt.Errorf("stored module %s has sha256 %s: changed on disk, discarded", s.modulePath(e.ModuleSHA256), got)
	}
	pinned, err := name.NewDigest(e.Pinned)
	if err != nil {
		return err
	}
	var sigs []Signature
	if b, err := os.ReadFile(s.signaturesPath(pinned)); err == nil {
		_ = json.Unmarshal(b, &sigs)
	}
	by, err := s.admit(ctx, e.Pinned, pinned, bin, sigs)
	if err != nil {
		return err
	}
	return s.serve(repo, e, bin, by)
}

// Run pulls the sources not served yet, again after a registry could not be reached (with
// jittered backoff), and at once when PullNow asks, until ctx is done.
func (s *Sources) Run(ctx context.Context) error {
	defer close(s.ended)
	defer s.syncedOnce.Do(func() { close(s.synced) })
	delay := s.cfg.Retry
	var replies []chan struct{}
	for {
		retry := false
		if len(s.todo) > 0 {
			retry = s.Sync(ctx)
		}
		s.syncedOnce.Do(func() { close(s.synced) })
		for _, r := range replies {
			close(r)
		}
		replies = nil
		if ctx.Err() != nil {
			return nil
		}
		var again <-chan time.Time
		var t *time.Timer
		if retry {
			t = time.NewTimer(jittered(delay))
			again = t.C
			delay = min(2*delay, maxRetry)
		} else {
			delay = s.cfg.Retry
		}
		select {
		case <-ctx.Done():
		case <-again:
		case r := <-s.kick:
			replies = append(replies, r)
			s.requeue()
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			for _, r := range replies {
				close(r)
			}
			return nil
		}
	}
}

// maxRetry is the longest wait before pulling again after a registry could not be reached.
const maxRetry = 5 * time.Minute

// jittered returns a random duration between d/2 and d, so that the nodes of a fleet that lost
// a registry together do not all come back to it at the same moment.
func jittered(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// requeue puts back every source that does not serve its configured revision, the refused
// ones included, for Run's next pass.
func (s *Sources) requeue() {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	for repo, ref := range s.byRepo {
		if e, ok := s.idx[repo]; !ok || e.Ref != ref || s.Status(repo).Error != "" {
			s.todo[repo] = ref
		}
	}
}

var errStopped = errors.New("oci: the sources are not being pulled: the daemon is stopping")

// PullNow has Run try at once every source that does not serve its configured revision,
// refused ones included, and returns when that try is over (or ctx is done, or Run is not
// running).
func (s *Sources) PullNow(ctx context.Context) error {
	r := make(chan struct{})
	select {
	case s.kick <- r:
	case <-s.ended:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r:
		return nil
	case <-s.ended:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Synced is closed once Run has tried every source that was still to pull once (whether the
// pull succeeded or not), or has returned.
func (s *Sources) Synced() <-chan struct{} { return s.synced }

// Sync tries every source still to pull once, at most SourcesConfig.MaxParallel at a time,
// each within SourcesConfig.PullTimeout, and reports whether one failed in a way that a later
// try may fix (a registry down). Refused revisions (the policy, content that is not a handler
// or does not match its digest) are not pulled again until PullNow or a restart.
func (s *Sources) Sync(ctx context.Context) (retry bool) {
	repos := make([]string, 0, len(s.todo))
	for repo := range s.todo {
		repos = append(repos, repo)
	}
	slices.Sort(repos)
	type outcome struct{ done, transient bool }
	out := make([]outcome, len(repos))
	sem := make(chan struct{}, s.cfg.MaxParallel)
	var wg sync.WaitGroup
	for i, repo := range repos {
		ref := s.todo[repo]
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			done, transient := s.try(ctx, repo, ref)
			out[i] = outcome{done, transient}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	for i, repo := range repos {
		switch {
		case out[i].done:
			delete(s.todo, repo)
		case out[i].transient:
			retry = true
		default:
			delete(s.todo, repo)
		}
	}
	return retry
}

// try pulls one source once and says whether it is done with, or failed in a way a later
// try may fix.
func (s *Sources) try(ctx context.Context, repo, ref string) (done, transient bool) {
	ctx, span := tracing.StartRoot(ctx, s.cfg.Tracer, tracing.SpanPull)
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PullTimeout)
	err := s.pull(ctx, pctx, repo, ref)
	cancel()
	if span.IsRecording() {
		span.SetAttributes(attribute.String(tracing.AttrSource, ref), attribute.String(tracing.AttrOutcome, cmp.Or(Reason(err), "pulled")))
	}
	tracing.End(span, err, Reason(err))
	if err == nil {
		return true, false
	}
	if ctx.Err() != nil {
		return false, true
	}
	err = BoundError(err)
	s.setError(repo, err)
	serving := s.Status(repo).Pinned
	transient = !Refusal(err)
	args := []any{"source", ref, "reason", Reason(err), "error", err}
	if serving != "" {
		args = append(args, "serving", serving)
	}
	switch {
	case transient && serving != "":
		s.log.Warn("handler source not pulled; the last pulled revision keeps serving, trying again", args...)
	case transient:
		s.log.Warn("handler source not pulled; trying again", args...)
	case serving != "":
		s.log.Error("handler source refused; the last pulled revision keeps serving", args...)
	default:
		s.log.Error("handler source refused", args...)
	}
	return false, transient
}

// Refusal reports whether err refuses a revision (the signature policy, content that is not a
// handler or does not match its digest) rather than failing to reach it.
func Refusal(err error) bool {
	return errors.Is(err, ErrPolicy) || errors.Is(err, ErrBadArtifact) || errors.Is(err, ErrIntegrity)
}

// Reasons a source does not serve, as SourceStatus.Reason and the metrics name them.
const (
	ReasonPending     = "pending"     // not pulled yet
	ReasonUnreachable = "unreachable" // the registry could not be reached, or did not answer in time
	ReasonNotFound    = "not_found"   // the registry has no such manifest
	ReasonPolicy      = "policy"      // refused by the signature policy
	ReasonIntegrity   = "integrity"   // content that does not match its digest
	ReasonBadArtifact = "bad_artifact"
	ReasonError       = "error"
)

// Reason names the class of a pull's error.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrIntegrity):
		return ReasonIntegrity
	case errors.Is(err, ErrPolicy):
		return ReasonPolicy
	case errors.Is(err, ErrBadArtifact):
		return ReasonBadArtifact
	case errors.Is(err, ErrNotFound):
		return ReasonNotFound
	case errors.Is(err, ErrUnreachable):
		return ReasonUnreachable
	}
	return ReasonError
}

// pull fetches ref, its signatures, admits it, stores it and serves it.
// netCtx bounds what is fetched from the registry (PullTimeout); ctx, the rest: reading the
// module's plugin types compiles it, which a loaded machine may take longer to do than a
// registry to answer.
func (s *Sources) pull(ctx, netCtx context.Context, repo, ref string) error {
	// A fetch cut short by PullTimeout says so.
	timedOut := func(err error) error {
		if netCtx.Err() != nil && ctx.Err() == nil && !Refusal(err) {
			return fmt.Errorf("%w: %s: the registry did not answer within %s (handlers.pull.timeout): %v", ErrUnreachable, ref, s.cfg.PullTimeout, err)
		}
		return err
	}
	p, err := Pull(netCtx, ref, s.cfg.Remote)
	if err != nil {
		return timedOut(err)
	}
	if p.Resolved {
		s.log.Warn("handler source named by a tag: resolved once and pinned; name the digest in handlers.sources so that every node serves the same revision",
			"source", ref, "pinned", p.Pinned.String())
	}
	sigs, err := FetchSignatures(netCtx, p.Pinned, s.cfg.Remote)
	if err != nil {
		return timedOut(fmt.Errorf("signatures of %s: %w", p.Pinned, err))
	}
	vctx, span := tracing.Start(ctx, s.cfg.Tracer, tracing.SpanVerify, trace.SpanKindInternal)
	by, err := s.admit(vctx, ref, p.Pinned, p.Module, sigs)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(tracing.AttrSource, p.Pinned.String()), attribute.Int("wasmhost.oci.signatures", len(sigs)),
			attribute.StringSlice("wasmhost.oci.signed_by", by))
	}
	tracing.End(span, err, Reason(err))
	if err != nil {
		return err
	}
	if err := writeAtomic(s.modulePath(p.ModuleSHA256), p.Module); err != nil {
		return err
	}
	if sigs != nil {
		b, _ := json.Marshal(sigs)
		if err := writeAtomic(s.signaturesPath(p.Pinned), b); err != nil {
			return err
		}
	}
	e := indexEntry{Ref: ref, Pinned: p.Pinned.String(), ModuleSHA256: p.ModuleSHA256, Layout: p.Layout, PulledAt: time.Now().UTC()}
	s.idxMu.Lock()
	old, hadOld := s.idx[repo]
	s.idx[repo] = e
	err = s.saveIndex()
	s.idxMu.Unlock()
	if err != nil {
		return err
	}
	if err := s.serve(repo, e, p.Module, by); err != nil {
		return err
	}
	s.idxMu.Lock()
	if hadOld && old.ModuleSHA256 != e.ModuleSHA256 && !s.stillUsed(old.ModuleSHA256) {
		_ = os.Remove(s.modulePath(old.ModuleSHA256))
	}
	s.idxMu.Unlock()
	s.log.Info("handler source pulled", "source", ref, "pinned", e.Pinned, "layout", e.Layout, "sha256", e.ModuleSHA256, "signed_by", by)
	return nil
}

func (s *Sources) stillUsed(sum string) bool {
	for _, e := range s.idx {
		if e.ModuleSHA256 == sum {
			return true
		}
	}
	return false
}

// admit applies the signature policy to a module: every plugin type it declares must be
// covered by a key that signed it, or allowed unsigned.
func (s *Sources) admit(ctx context.Context, ref string, pinned name.Digest, bin []byte, sigs []Signature) ([]string, error) {
	types, err := s.cfg.PluginTypes(ctx, ref, bin)
	if err != nil {
		return nil, fmt.Errorf("%v (%w: %s)", err, ErrBadArtifact, pinned)
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("the module declares no plugin type (%w: %s)", ErrBadArtifact, pinned)
	}
	signedBy, problems := Verify(sigs, pinned, s.cfg.Keys)
	var names []string
	for _, k := range signedBy {
		names = append(names, k.Name)
	}
	var refusals []string
	for _, t := range types {
		if slices.ContainsFunc(signedBy, func(k Key) bool { return slices.Contains(k.PluginTypes, t) }) {
			continue
		}
		if slices.Contains(s.cfg.AllowUnsigned, t) {
			continue
		}
		switch {
		case len(signedBy) > 0:
			refusals = append(refusals, fmt.Sprintf("plugin type %s: signed by %s, which may not sign handlers of %s (handlers.trust.keys[].pluginTypes)", t, strings.Join(names, ", "), t))
		case len(sigs) == 0:
			refusals = append(refusals, fmt.Sprintf("plugin type %s: unsigned, and %s is not in handlers.trust.allowUnsigned (no Sigstore bundle refers to it, and no tag %s)", t, t, SignatureTag(pinned).TagStr()))
		default:
			refusals = append(refusals, fmt.Sprintf("plugin type %s: no signature verifies with a configured key, and %s is not in handlers.trust.allowUnsigned (%s)", t, t, strings.Join(problems, "; ")))
		}
	}
	if len(refusals) > 0 {
		// The reason first: a table cuts the message short.
		return nil, fmt.Errorf("%s (%w: %s)", strings.Join(refusals, "; "), ErrPolicy, pinned)
	}
	if len(signedBy) == 0 {
		s.log.Warn("serving an unsigned handler: its plugin types allow unsigned ones (handlers.trust.allowUnsigned)", "source", ref, "plugin_types", types)
	}
	return names, nil
}

// serve writes bin for the host (atomically, only when it changed) and records the status.
func (s *Sources) serve(repo string, e indexEntry, bin []byte, signedBy []string) error {
	s.mu.Lock()
	st := s.status[repo]
	file := st.File
	s.mu.Unlock()
	if cur, err := os.ReadFile(file); err != nil || sha256hex(cur) != e.ModuleSHA256 {
		if err := writeAtomic(file, bin); err != nil {
			return err
		}
	}
	s.mu.Lock()
	st.Pinned, st.ModuleSHA256, st.Layout, st.SignedBy = e.Pinned, e.ModuleSHA256, e.Layout, signedBy
	if e.Ref == st.Ref {
		st.Error, st.Reason, st.Refused, st.ErrorAt = "", "", false, time.Time{}
	}
	s.mu.Unlock()
	s.changed()
	return nil
}

func (s *Sources) setError(repo string, err error) {
	s.mu.Lock()
	if st := s.status[repo]; st != nil {
		st.Error, st.Reason, st.Refused, st.ErrorAt = BoundText(err.Error(), MaxErrorText), Reason(err), Refusal(err), time.Now()
	}
	s.mu.Unlock()
	s.changed()
}

func (s *Sources) changed() {
	if s.cfg.OnChange != nil {
		s.cfg.OnChange()
	}
}

// Status returns the status of the source of repository repo (empty if there is none).
func (s *Sources) Status(repo string) SourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.status[repo]; st != nil {
		out := *st
		out.SignedBy = slices.Clone(st.SignedBy)
		return out
	}
	return SourceStatus{}
}

// Statuses returns the status of every source, sorted by reference.
func (s *Sources) Statuses() []SourceStatus {
	s.mu.Lock()
	repos := make([]string, 0, len(s.status))
	for repo := range s.status {
		repos = append(repos, repo)
	}
	s.mu.Unlock()
	out := make([]SourceStatus, 0, len(repos))
	for _, repo := range repos {
		out = append(out, s.Status(repo))
	}
	slices.SortFunc(out, func(a, b SourceStatus) int { return strings.Compare(a.Ref, b.Ref) })
	return out
}

func (s *Sources) indexPath() string { return filepath.Join(s.cfg.StoreDir, "index.json") }
func (s *Sources) modulePath(sum string) string {
	return filepath.Join(s.cfg.StoreDir, "modules", sum+".wasm")
}
func (s *Sources) signaturesPath(d name.Digest) string {
	return filepath.Join(s.cfg.StoreDir, "signatures", strings.Replace(d.DigestStr(), ":", "-", 1)+".json")
}

func (s *Sources) saveIndex() error {
	b, err := json.MarshalIndent(s.idx, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(s.indexPath(), b)
}

// writeAtomic writes b to path through a temporary file in the same directory and a rename,
// so that a reader (the host) sees the old file or the new one, never a part.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("oci: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("oci: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("oci: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	return nil
}

// SHA256Hex is the sha256 of b, hex, as Pulled.ModuleSHA256 and SourceStatus name modules.
func SHA256Hex(b []byte) string { return sha256hex(b) }

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
