// Package adminv1 is the generated Go code of the wasmhost admin API, wasmhost.admin.v1
// (admin.proto beside this file; regenerate with gen.sh).
//
// The wire API is versioned: within v1, fields and enum values are only ever added. The Go
// package is generated code and follows the proto file. Package
// github.com/wasmhost/wasmhost/admin/client connects to a daemon's admin socket with it.
package adminv1
