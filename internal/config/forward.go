package config

import (
	"path/filepath"
	"slices"
	"strings"
)

// ForwardConfig puts wasmhost in front of the kubelet (docs/forward.md): a plugin of a type in
// Types that its handler admitted is presented to the kubelet by a registration socket wasmhost
// makes in KubeletDir, and is told it is registered only once the kubelet accepted it too.
// Forwarding is on when both are set.
type ForwardConfig struct {
	// KubeletDir is the kubelet's plugin registration directory (<kubelet root>/plugins_registry,
	// usually /var/lib/kubelet/plugins_registry), as wasmhost sees it. Defaults to "": off.
	KubeletDir string `yaml:"kubeletDir"`
	// Types are the plugin types forwarded, e.g. [CSIPlugin, DRAPlugin, DevicePlugin].
	// Defaults to none.
	Types []string `yaml:"types"`
}

// On reports whether forwarding is on: both keys are set.
func (f ForwardConfig) On() bool { return f.KubeletDir != "" && len(f.Types) > 0 }

// ForwardSocketNameMin is the shortest name a forward socket takes in forward.kubeletDir
// (its temporary dot-name: .wasmhost-, a hash, 8 random hex digits): the directory must leave room for it within a
// socket path's 107 bytes. internal/registration/forward names its sockets so.
const ForwardSocketNameMin = len(".wasmhost-12345678-12345678")

// maxSocketPath is the longest path a unix socket can be bound at on Linux (sun_path holds
// 108 bytes, the last one the terminating NUL).
const maxSocketPath = 107

// validateForward checks forward: the directory is absolute, is neither wasmhost's socket
// directory nor inside it nor around it, and leaves room for a socket name; the types are
// not empty and not repeated.
func (c *Config) validateForward(bad func(key, format string, args ...any)) {
	f := c.Forward
	for i, t := range f.Types {
		if strings.TrimSpace(t) == "" {
			bad("forward.types", "entry %d is empty", i)
		} else if slices.Index(f.Types, t) != i {
			bad("forward.types", "%q is listed twice", t)
		}
	}
	if f.KubeletDir == "" {
		return
	}
	dir := filepath.Clean(f.KubeletDir)
	if !filepath.IsAbs(dir) {
		bad("forward.kubeletDir", "%q: want an absolute path (the kubelet's plugins_registry, e.g. /var/lib/kubelet/plugins_registry)", f.KubeletDir)
		return
	}
	if c.SocketDir != "" {
		sock := filepath.Clean(c.SocketDir)
		switch {
		case dir == sock:
			bad("forward.kubeletDir", "%s is wasmhost's own socketDir: the kubelet's directory must be another one (plugins register in socketDir, wasmhost presents them in forward.kubeletDir)", f.KubeletDir)
		case within(dir, sock):
			bad("forward.kubeletDir", "%s is inside wasmhost's socketDir %s, which wasmhost watches: its own forward sockets would be taken for plugins", f.KubeletDir, c.SocketDir)
		case within(sock, dir):
			bad("forward.kubeletDir", "%s holds wasmhost's socketDir %s: the kubelet watches every subdirectory and would register the plugins directly, bypassing their handlers", f.KubeletDir, c.SocketDir)
		}
	}
	if n := len(dir) + 1 + ForwardSocketNameMin; n > maxSocketPath {
		bad("forward.kubeletDir", "%s is too long: a socket in it (%d bytes at least) would be over the %d bytes a unix socket path may have", f.KubeletDir, n, maxSocketPath)
	}
}

// within reports whether path is strictly inside dir (both clean and absolute).
func within(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
