//go:build !linux

package forward

// renameNoReplace renames from to to without replacing a file at to (link, then unlink).
func renameNoReplace(from, to string) error { return linkUnlink(from, to) }
