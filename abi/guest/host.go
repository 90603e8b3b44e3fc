package guest

import (
	"errors"

	"github.com/wasmhost/wasmhost/abi"
)

// Log writes a log line through the host, at a level. Lines over abi.MaxLogLineBytes are cut.
// Log does not format: build the line with string concatenation and strconv, or use
// guestfmt.Logf, which links package fmt into the module.
func Log(level Level, msg string) {
	hostLog(int32(level), truncate(msg, abi.MaxLogLineBytes))
}

// Publish publishes a key and value about the plugin being registered; the host shows them with
// the plugin (for example in its state). It is allowed only in Register; elsewhere it returns an
// error wrapping ErrDenied. A register call publishes at most the host's handlers.limits
// publishKeys keys (abi.MaxPublishedKeys by default) and publishBytes bytes of keys and values;
// over them, it returns an error wrapping ErrTooLarge with the host's reason. Publishing a key
// again replaces its value. The host forgets them when the plugin is deregistered.
func Publish(key, value string) error {
	return codeErr(abi.ImportPublish, key, hostPublish(key, value))
}

// KV is the key-value store the host keeps for the plugin type of the current call. It is shared
// by every instance of the module and outlives them, so it is where a handler keeps what it must
// remember between calls. Keys are 1 to abi.MaxKeyBytes bytes, values at most abi.MaxValueBytes,
// and a plugin type's store holds at most abi.MaxKVEntries keys; the stores of all the types of
// one handler file hold at most the host's handlers.limits kvKeysPerHandler keys and
// kvBytesPerHandler bytes together. A write over a limit returns an error wrapping ErrTooLarge,
// with the host's reason.
var KV KVStore

// KVStore is the type of KV.
type KVStore struct{}

// Get returns the value of key, and whether it exists.
func (KVStore) Get(key string) (value []byte, ok bool, err error) {
	buf := make([]byte, 256)
	// The value may change size between two calls when another instance sets it: try a few
	// times with a buffer of the size last reported.
	for range 4 {
		n := hostKVGet(key, buf)
		switch {
		case n == abi.CodeNotFound:
			return nil, false, nil
		case n < 0:
			return nil, false, codeErr(abi.ImportKVGet, key, n)
		case int(n) <= len(buf):
			return buf[:n], true, nil
		}
		buf = make([]byte, n)
	}
	return nil, false, &callError{fn: abi.ImportKVGet, key: key, err: errUnstable}
}

var errUnstable = errors.New("the value kept changing size while being read")

// Set sets key to value.
func (KVStore) Set(key string, value []byte) error {
	return codeErr(abi.ImportKVSet, key, hostKVSet(key, value))
}

// Delete deletes key. Deleting a key that does not exist is not an error.
func (KVStore) Delete(key string) error {
	return codeErr(abi.ImportKVDelete, key, hostKVDelete(key))
}

// CompareAndSet sets key to value if, and only if, its value is still old, atomically: two
// instances handling two plugins at once cannot both act on what they read. A nil old means
// "the key does not exist" (Get returns a nil value for a missing key and a non-nil one for
// an empty value, so Get's answer can be passed as it is); a nil value deletes the key. It
// returns false, with no error, when the key's value was not old: another call changed it
// since it was read; read it again and decide again. It needs a host of ABI v1.1 or later
// (abi.ImportKVCompareAndSet); an older host refuses a module that calls it.
func (KVStore) CompareAndSet(key string, old, value []byte) (bool, error) {
	switch code := hostKVCompareAndSet(key, old, value); code {
	case abi.StatusOK:
		return true, nil
	case abi.CodeConflict:
		return false, nil
	default:
		return false, codeErr(abi.ImportKVCompareAndSet, key, code)
	}
}
