package forward

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A record says that wasmhost made a socket in the kubelet's directory: where (the socket's
// final path, and the temporary dot-name it was bound at first) and which file it is (its
// device and inode, read right after bind). It is written before the socket takes its final
// name and removed after the socket is, one file per socket in Config.RecordDir, so that a
// later start removes what a crash or a stop left, and nothing else: a file at a recorded path
// whose device and inode differ is not wasmhost's and stays.
//
// One write per socket: on a loaded node a metadata operation costs milliseconds, and a burst
// of plugins makes as many sockets. While the daemon runs it also knows each socket's change
// time (once renamed into place), so that a socket someone else removed and another process
// made again at the same path, which may get the same inode number, is not taken for its own
// either; after a restart the device and inode decide alone (a file of another process would
// have to take a name wasmhost-…-<hash>.sock, and the inode number of the one removed).
type record struct {
	Path string `json:"path"`
	Temp string `json:"temp"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// recordSuffix ends the name of every record file; the name before it is the socket's.
const recordSuffix = ".json"

// maxRecordSize bounds a record file read at start: a larger one is not a record of ours.
const maxRecordSize = 4 << 10

func (f *Forwarder) recordPath(socketPath string) string {
	return filepath.Join(f.cfg.RecordDir, filepath.Base(socketPath)+recordSuffix)
}

// writeRecord writes rec. It is neither written through a temporary file nor synced: a record
// cut short by a crash is ignored at the next start (its socket is left, and the plugin's next
// Open says a file is in the way), and a record guards against the daemon's end, which the
// page cache survives.
func (f *Forwarder) writeRecord(rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.recordPath(rec.Path), b, 0o600); err != nil {
		return fmt.Errorf("forward: recording socket %s: %w", rec.Path, err)
	}
	return nil
}

func (f *Forwarder) removeRecord(socketPath string) {
	if err := os.Remove(f.recordPath(socketPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.log.Warn("could not remove the record of a forward socket; the next start removes the socket only if it is still the one made", "forward_socket", socketPath, "error", err)
	}
}

// fileID is what tells a file from another: its device, inode and change time.
type fileID struct {
	dev, ino uint64
	ctime    int64 // ns since the epoch
	socket   bool
}

// identity returns the identity of the file at path, not following a symlink.
func identity(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("forward: %s: no device and inode on this system", path)
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), ctime: ctimeOf(st),
		socket: fi.Mode().Type() == fs.ModeSocket}, nil
}

// removeIfSame removes the socket at path if it is still the file of device dev and inode
// ino, and of change time ctime unless it is 0, and reports whether it did.
func removeIfSame(path string, dev, ino uint64, ctime int64) (bool, error) {
	id, err := identity(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !id.socket || id.dev != dev || id.ino != ino || (ctime != 0 && id.ctime != ctime) {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// cleanStale removes the sockets the records of an earlier run name, where they are still
// the files it made, and the records. It returns how many sockets it removed.
func (f *Forwarder) cleanStale() (int, error) {
	ents, err := os.ReadDir(f.cfg.RecordDir)
	if err != nil {
		return 0, fmt.Errorf("forward: reading the records of forward sockets: %w", err)
	}
	removed := 0
	for _, e := range ents {
		name := e.Name()
		full := filepath.Join(f.cfg.RecordDir, name)
		if !strings.HasSuffix(name, recordSuffix) || !e.Type().IsRegular() {
			continue
		}
		rec, err := readRecord(full)
		if err != nil {
			f.log.Warn("ignoring a record of a forward socket that cannot be read; no socket is removed for it", "record", full, "error", err)
			os.Remove(full)
			continue
		}
		for _, p := range []string{rec.Path, rec.Temp} {
			if p == "" {
				continue
			}
			ok, err := removeIfSame(p, rec.Dev, rec.Ino, 0)
			switch {
			case err != nil:
				f.log.Warn("could not remove a forward socket left by an earlier run", "forward_socket", p, "error", err)
			case ok:
				removed++
				f.log.Info("removed a forward socket left by an earlier run; the kubelet deregisters its plugin, registered again once it registers here", "forward_socket", p)
			}
		}
		os.Remove(full)
	}
	return removed, nil
}

func readRecord(path string) (record, error) {
	fh, err := os.Open(path)
	if err != nil {
		return record{}, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxRecordSize+1))
	if err != nil {
		return record{}, err
	}
	if len(b) > maxRecordSize {
		return record{}, fmt.Errorf("larger than %d bytes", maxRecordSize)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return record{}, err
	}
	if !filepath.IsAbs(rec.Path) || rec.Ino == 0 {
		return record{}, fmt.Errorf("no absolute path or no inode: %+v", rec)
	}
	return rec, nil
}
