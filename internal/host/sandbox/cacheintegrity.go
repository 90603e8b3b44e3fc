package sandbox

// The compile cache's integrity. wazero keys each entry by the sha256 of the module's bytes
// (with its own version and the CPU's features), so a module pulled by digest and a file with
// the same bytes share one entry; but it checks an entry it reads only with a CRC, which finds
// corruption, not a change made on purpose, and it runs what it reads. So the host keeps, beside
// the cache, the sha256 of every entry it saw written (CacheDir/wasmhost-cache.sha256, in
// sha256sum's format), and before every compile it discards the entries that are not on that
// list or no longer match it: an entry changed or planted by anything but this daemon's compiles
// is deleted before wazero can read it, and the module is compiled again.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// cacheSumsFile is the list of the cache entries' sha256, in CacheDir.
const cacheSumsFile = "wasmhost-cache.sha256"

// cacheSums is the integrity list of a compile cache directory; nil (no CacheDir) does nothing.
type cacheSums struct {
	mu   sync.Mutex
	dir  string
	sums map[string]string // path relative to dir → sha256, hex
	log  *slog.Logger
}

func newCacheSums(dir string, log *slog.Logger) *cacheSums {
	c := &cacheSums{dir: dir, sums: map[string]string{}, log: log}
	f, err := openRegular(filepath.Join(dir, cacheSumsFile))
	if err != nil {
		return c
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, rel, ok := strings.Cut(sc.Text(), "  ")
		if ok && len(sum) == 64 && filepath.IsLocal(rel) {
			c.sums[rel] = sum
		}
	}
	return c
}

// entries lists the cache's entries: the regular files in wazero's subdirectories (of each
// module's directory, and at the top in the former layout), less the temporary files of
// writes in progress.
func (c *cacheSums) entries() []string {
	var out []string
	subs, _ := filepath.Glob(filepath.Join(c.dir, "wazero-*"))
	mods, _ := filepath.Glob(filepath.Join(c.dir, moduleCacheDir, "*", "wazero-*"))
	for _, sub := range append(subs, mods...) {
		_ = filepath.WalkDir(sub, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || (d.Type().IsRegular() && strings.HasSuffix(p, ".tmp")) {
				return nil
			}
			if rel, err := filepath.Rel(c.dir, p); err == nil {
				out = append(out, rel)
			}
			return nil
		})
	}
	slices.Sort(out)
	return out
}

func fileSHA256(p string) (string, error) {
	f, err := openRegular(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verify deletes the entries that are not on the list or do not match it, and returns how
// many it deleted.
func (c *cacheSums) verify() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, rel := range c.entries() {
		p := filepath.Join(c.dir, rel)
		want, listed := c.sums[rel]
		got, err := fileSHA256(p)
		if err == nil && listed && got == want {
			continue
		}
		why := "not written by this daemon's compiles"
		if listed {
			why = fmt.Sprintf("changed since it was written (sha256 %s, was %s)", got, want)
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			c.log.Error("compile cache entry not trusted, and it could not be removed", "entry", p, "reason", why, "error", err)
			continue
		}
		delete(c.sums, rel)
		n++
		c.log.Warn("compile cache entry discarded; its module is compiled again", "entry", p, "reason", why)
	}
	if n > 0 {
		c.saveLocked()
	}
	return n
}

// record adds the entries written since the last call to the list.
func (c *cacheSums) record() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	present := map[string]bool{}
	for _, rel := range c.entries() {
		present[rel] = true
		if _, ok := c.sums[rel]; ok {
			continue
		}
		if sum, err := fileSHA256(filepath.Join(c.dir, rel)); err == nil {
			c.sums[rel], changed = sum, true
		}
	}
	for rel := range c.sums {
		if !present[rel] {
			delete(c.sums, rel)
			changed = true
		}
	}
	if changed {
		c.saveLocked()
	}
}

// saveLocked writes the list through a temporary file and a rename.
func (c *cacheSums) saveLocked() {
	rels := make([]string, 0, len(c.sums))
	for rel := range c.sums {
		rels = append(rels, rel)
	}
	slices.Sort(rels)
	var b strings.Builder
	for _, rel := range rels {
		fmt.Fprintf(&b, "%s  %s\n", c.sums[rel], rel)
	}
	tmp, err := os.CreateTemp(c.dir, cacheSumsFile+".*.tmp")
	if err == nil {
		_, err = tmp.WriteString(b.String())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(c.dir, cacheSumsFile))
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}
	if err != nil {
		c.log.Error("writing the compile cache's integrity list; its entries will be compiled again", "error", err)
	}
}
