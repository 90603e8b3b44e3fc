package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// node-feature-discovery's local source, as nfd-worker reads features.d.
const (
	// MaxFeatureFileSize is the largest feature file nfd-worker reads; it skips a larger one
	// whole.
	MaxFeatureFileSize = 64 << 10
	// DirectivePrefix starts a directive line; other lines starting with '#' are comments.
	DirectivePrefix = "# +"
	// DirectiveExpiryTime: the lines after it are dropped once the time (RFC 3339) is past.
	DirectiveExpiryTime = "expiry-time"
	// DirectiveNoLabel: the next feature line is an attribute, not a label.
	DirectiveNoLabel = "no-label"
	// DirectiveNoFeature: the next feature line is a label, not an attribute.
	DirectiveNoFeature = "no-feature"
)

// FeatureFile is a sink that writes node-feature-discovery feature files into nfd-worker's
// features.d: the labels as lines name=value, the attributes as lines after # +no-label (so
// they are features for NodeFeatureRules, not labels). It needs no credentials. Each file is
// written whole under a dot-name (which nfd-worker ignores) and renamed into place, starts
// with # +expiry-time so that nfd-worker drops the labels of a daemon that stopped
// rewriting it, and stays within MaxFeatureFileSize: what does not fit goes to Name-2,
// Name-3, …. Instances have no place in the format and are not written.
type FeatureFile struct {
	// Dir is the features.d directory. Required.
	Dir string
	// Name is the first file's name. Defaults to "wasmhost".
	Name string
	// Expiry is how long after a write the file's lines expire; the publisher rewrites it
	// every half of it. Defaults to 1h.
	Expiry time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	leftOut []string // by the last Write; only the sink's worker calls Write and LeftOut
}

// LeftOut returns the names of the entries the last Write left out: too large for any file.
func (f *FeatureFile) LeftOut() []string { return f.leftOut }

// The defaults of FeatureFile: the one place they are written (config.Default takes them).
const (
	DefaultFeatureFileName   = "wasmhost"
	DefaultFeatureFileExpiry = time.Hour
)

func (f *FeatureFile) name() string {
	if f.Name == "" {
		return DefaultFeatureFileName
	}
	return f.Name
}

func (f *FeatureFile) expiry() time.Duration {
	if f.Expiry <= 0 {
		return DefaultFeatureFileExpiry
	}
	return f.Expiry
}

func (f *FeatureFile) now() time.Time {
	if f.Now == nil {
		return time.Now()
	}
	return f.Now()
}

// Name names the sink.
func (f *FeatureFile) SinkName() string { return "featureFile" }

// Target is the first file's path.
func (f *FeatureFile) Target() string { return filepath.Join(f.Dir, f.name()) }

// RefreshAfter is half the expiry: the file is rewritten long before nfd-worker drops it.
func (f *FeatureFile) RefreshAfter() time.Duration { return f.expiry() / 2 }

// fileName returns the name of the i-th file (0-based).
func (f *FeatureFile) fileName(i int) string {
	if i == 0 {
		return f.name()
	}
	return f.name() + "-" + strconv.Itoa(i+1)
}

// ours returns the index of a file name of this sink, or -1.
func (f *FeatureFile) ours(name string) int {
	if name == f.name() {
		return 0
	}
	rest, ok := strings.CutPrefix(name, f.name()+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 2 || strconv.Itoa(i) != rest {
		return -1
	}
	return i - 1
}

// Render returns the files' contents for n, each within MaxFeatureFileSize, and the names of
// the entries that cannot fit in any file (left out, the rest written). Build never makes
// one (an entry is at most MaxKeyBytes); what a file held from before might.
func (f *FeatureFile) Render(n Node, expires time.Time) (files [][]byte, leftOut []string) {
	header := "# Written by wasmhost: what the handlers of its plugin types published (handlers.types.<T>.publish).\n" +
		"# Do not edit: it is rewritten every " + f.RefreshAfter().String() + "; past the expiry time nfd-worker drops it.\n" +
		DirectivePrefix + DirectiveExpiryTime + "=" + expires.UTC().Format(time.RFC3339) + "\n"
	// A label whose attribute says the same is one line, both; a label without one (a
	// plugin's presence) is a label only (no-feature), an attribute without a label only an
	// attribute (no-label). Load reads the same Node back.
	type entry struct{ name, text string }
	var entries []entry
	for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
		line := k + "=" + n.Labels[k] + "\n"
		if feat, name, _ := strings.Cut(k, "/"); n.Attributes[feat][name] != n.Labels[k] || !hasKey(n.Attributes[feat], name) {
			line = DirectivePrefix + DirectiveNoFeature + "\n" + line
		}
		entries = append(entries, entry{k, line})
	}
	for _, feat := range slices.Sorted(maps.Keys(n.Attributes)) {
		a := n.Attributes[feat]
		for _, k := range slices.Sorted(maps.Keys(a)) {
			name := feat + "/" + k
			if v, isLabel := n.Labels[name]; isLabel && v == a[k] {
				continue // the label's line makes it an attribute too
			}
			entries = append(entries, entry{name, DirectivePrefix + DirectiveNoLabel + "\n" + name + "=" + a[k] + "\n"})
		}
	}
	cur := bytes.NewBufferString(header)
	for _, e := range entries {
		if len(header)+len(e.text) > MaxFeatureFileSize {
			leftOut = append(leftOut, e.name)
			continue
		}
		if cur.Len()+len(e.text) > MaxFeatureFileSize {
			files = append(files, cur.Bytes())
			cur = bytes.NewBufferString(header)
		}
		cur.WriteString(e.text)
	}
	return append(files, cur.Bytes()), leftOut
}

// Write makes the directory hold n: every file written under a dot-name, synced and renamed
// into place, then the files of this sink beyond the ones needed removed.
func (f *FeatureFile) Write(_ context.Context, n Node) error {
	files, leftOut := f.Render(n, f.now().Add(f.expiry()))
	f.leftOut = leftOut
	for i, b := range files {
		if err := writeAtomic(f.Dir, f.fileName(i), b); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(f.Dir)
	if err != nil {
		return fmt.Errorf("feature files: %w", err)
	}
	for _, e := range ents {
		if i := f.ours(e.Name()); i >= len(files) {
			if err := os.Remove(filepath.Join(f.Dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("feature files: %w", err)
			}
		}
	}
	return syncDir(f.Dir)
}

func writeAtomic(dir, name string, b []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("feature file %s: %w", filepath.Join(dir, name), err)
	}
	defer os.Remove(tmp.Name()) // once renamed, there is nothing to remove
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644) // nfd-worker may run as another user
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("feature file %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("feature files: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("feature files: sync %s: %w", dir, err)
	}
	return nil
}

// Load reads what the files of this sink hold, as nfd-worker would (an expired file holds
// nothing). A missing directory or file holds nothing.
func (f *FeatureFile) Load(context.Context) (Node, error) {
	n := Empty()
	ents, err := os.ReadDir(f.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return n, fmt.Errorf("feature files: %w", err)
	}
	now := f.now()
	for _, e := range ents {
		if f.ours(e.Name()) < 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.Dir, e.Name()))
		if err != nil {
			return n, fmt.Errorf("feature files: %w", err)
		}
		ff, err := ParseFeatureFile(b, now)
		if err != nil {
			continue // nfd-worker would skip it too; the next write replaces it
		}
		for k, v := range ff.Labels {
			n.Labels[k] = v
		}
		for k, v := range ff.Features {
			feat, name, ok := strings.Cut(k, "/")
			if !ok {
				continue
			}
			if n.Attributes[feat] == nil {
				n.Attributes[feat] = map[string]string{}
			}
			n.Attributes[feat][name] = v
		}
	}
	return n, nil
}

// Features is what nfd-worker takes from one feature file.
type Features struct {
	// Labels: the lines that become labels; Features: those that become attributes of the
	// local.feature feature.
	Labels, Features map[string]string
	// Expires is the last expiry time the file set; zero when none.
	Expires time.Time
	// Problems are the directives nfd-worker would log as errors and ignore.
	Problems []string
}

// ParseFeatureFile reads a feature file by node-feature-discovery's rules: a file over
// MaxFeatureFileSize is refused whole; lines are trimmed; '#' starts a comment, and "# +"
// a directive (expiry-time=RFC3339 for the lines after it, no-label and no-feature for the
// next line only); other lines are name[=value], value "true" when absent; lines after an
// expiry time that is past (at now) are dropped.
func ParseFeatureFile(b []byte, now time.Time) (Features, error) {
	out := Features{Labels: map[string]string{}, Features: map[string]string{}}
	if len(b) > MaxFeatureFileSize {
		return out, fmt.Errorf("file size limit exceeded: %d bytes > %d bytes", len(b), MaxFeatureFileSize)
	}
	expiry := now
	var noLabel, noFeature bool
	for _, l := range bytes.Split(b, []byte("\n")) {
		line := strings.TrimSpace(string(l))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			d, ok := strings.CutPrefix(line, DirectivePrefix)
			if !ok {
				continue
			}
			key, value, hasValue := strings.Cut(d, "=")
			switch key {
			case DirectiveExpiryTime:
				t, err := time.Parse(time.RFC3339, strings.TrimSpace(value))
				if !hasValue || err != nil {
					out.Problems = append(out.Problems, fmt.Sprintf("bad expiry-time directive %q", line))
					continue
				}
				expiry, out.Expires = t, t
			case DirectiveNoLabel:
				noLabel = true
			case DirectiveNoFeature:
				noFeature = true
			default:
				out.Problems = append(out.Problems, fmt.Sprintf("unknown directive %q", key))
			}
			continue
		}
		if expiry.Before(now) {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			value = "true"
		}
		if noFeature {
			delete(out.Features, name)
		} else {
			out.Features[name] = value
		}
		if noLabel {
			delete(out.Labels, name)
		} else {
			out.Labels[name] = value
		}
		noLabel, noFeature = false, false
	}
	return out, nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
