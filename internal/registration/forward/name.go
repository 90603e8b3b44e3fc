package forward

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Names of the sockets made in the kubelet's directory:
//
//	wasmhost-<type>-<name>-<hash>.sock
//
// readable (the plugin's type and name, each byte outside [A-Za-z0-9._-] made '_', shortened
// to fit) and unique (hash: 8 hex digits of the SHA-256 of the plugin's registration socket,
// type and name, so that two plugins whose readable parts are alike or cut short never share a
// name, and a plugin gets the same name after a restart). The prefix is never a dot: the
// kubelet ignores dot-names. A socket is bound first under a dot-name (tempPrefix), which the
// kubelet ignores, and renamed into place once it listens with its mode set.
const (
	namePrefix = "wasmhost-"
	nameSuffix = ".sock"
	hashLen    = 8
	tempPrefix = ".wasmhost-"
	// maxSocketPath is the longest path a unix socket can be bound at on Linux (sun_path
	// holds 108 bytes with the terminating NUL).
	maxSocketPath = 107
	// minName is the length of the shortest name, without the readable part.
	minName = len(namePrefix) + hashLen + len(nameSuffix)
)

// socketName returns the name of the socket for the plugin of type typ and name name
// registered from pluginSocket, in a directory dir (its length bounds the name's).
func socketName(dir, pluginSocket, typ, name string) string {
	sum := sha256.Sum256([]byte(pluginSocket + "\x00" + typ + "\x00" + name))
	hash := hex.EncodeToString(sum[:])[:hashLen]
	room := maxSocketPath - len(dir) - 1 - minName - 1 // the readable part and its '-'
	if room < 1 {
		return namePrefix + hash + nameSuffix
	}
	readable := sanitize(typ) + "-" + sanitize(name)
	if len(readable) > room {
		readable = readable[:room]
	}
	return namePrefix + readable + "-" + hash + nameSuffix
}

// tempName returns the dot-name a socket is bound at before it is renamed to name: the
// prefix, its hash and 8 random hex digits (a name no earlier attempt left behind).
func tempName(name string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	hash := strings.TrimSuffix(name, nameSuffix)
	hash = hash[len(hash)-hashLen:]
	return tempPrefix + hash + "-" + hex.EncodeToString(r[:])
}

// MinNameLen is the length of the longest of the names a socket of the kubelet's directory
// has at the least: its temporary name (tempName). config.ForwardSocketNameMin is the same.
const MinNameLen = len(tempPrefix) + hashLen + 1 + 8

// sanitize keeps the bytes of s that are safe in a file name anyone can read back, and makes
// the others '_'.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
