package forward

import (
	"errors"
	"os"
)

// linkUnlink gives the file at from the name to, failing with an error matching os.ErrExist
// when to exists, then removes the name from.
func linkUnlink(from, to string) error {
	if err := os.Link(from, to); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &os.LinkError{Op: "link", Old: from, New: to, Err: os.ErrExist}
		}
		return err
	}
	return os.Remove(from)
}
