package main

import (
	"github.com/wasmhost/wasmhost/abi/wire"
)

// This file writes and reads the handler's store record in the protocol buffers wire format with
// package abi/wire: a protobuf library (or encoding/json) would add far more to the module than
// the handler itself.

// errMalformed is matched by every decoding error (wire.ErrMalformed).
var errMalformed = wire.ErrMalformed

// record is what the handler keeps in the store about one registration socket:
//
//	message Record {
//	  string name = 1;     // the driver's name
//	  string endpoint = 2; // its DRA endpoint
//	  string service = 3;  // the DRAPlugin service to use, e.g. v1.DRAPlugin
//	  string health = 4;   // the DRAResourceHealth service offered; empty when none
//	}
type record struct {
	name, endpoint, service, health string
}

func (r record) encode() []byte {
	var b []byte
	for i, s := range [...]string{r.name, r.endpoint, r.service, r.health} {
		b = wire.AppendNonEmpty(b, uint32(i+1), s)
	}
	return b
}

// decodeRecord decodes a record. Fields it does not know are skipped, of any wire type but the
// deprecated groups.
func decodeRecord(b []byte) (record, error) {
	var r record
	fields := [...]*string{&r.name, &r.endpoint, &r.service, &r.health}
	err := wire.Walk(b, func(f wire.Field) error {
		if f.Num > uint32(len(fields)) {
			return nil
		}
		s, err := f.Text() // a known field of another wire type is malformed
		*fields[f.Num-1] = s
		return err
	})
	if err != nil {
		return record{}, err
	}
	return r, nil
}
