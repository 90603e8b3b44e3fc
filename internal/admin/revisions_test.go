package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/admin/admintest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// fakeControl answers as a daemon whose host knows rev.example only.
type fakeControl struct{}

func (fakeControl) Rollback(_ context.Context, t, sha string) (state.Revision, error) {
	if t != "rev.example" {
		return state.Revision{}, fmt.Errorf("%w: plugin type %s has no handler", admin.ErrNotFound, t)
	}
	return state.Revision{SHA256: "ab" + sha, Version: "1.0.0", Serving: true, Pinned: true}, nil
}

func (fakeControl) ClearPin(context.Context, string) error {
	return fmt.Errorf("%w: plugin type rev.example is not pinned", admin.ErrNotFound)
}

func (fakeControl) SetShadow(_ context.Context, t, c string) (*state.Shadow, error) {
	if c == "/bad.wasm" {
		return nil, fmt.Errorf("%w: shadow /bad.wasm does not declare plugin type %s", admin.ErrInvalid, t)
	}
	return &state.Shadow{PluginType: t, SHA256: "cd", File: c}, nil
}

func TestRevisionRPCs(t *testing.T) {
	src := &admintest.Source{}
	src.Store().SetHistory(func(t string) (state.History, bool) {
		if t != "rev.example" {
			return state.History{}, false
		}
		return state.History{PluginType: t, Revisions: []state.Revision{{SHA256: "ab", Version: "2.0.0", InFile: true, RolledBack: "5 of 5 calls trapped"}, {SHA256: "cd", Serving: true, Pinned: true}},
			Pin: &state.Pin{PluginType: t, SHA256: "cd", FileSHA256: "ab", Auto: true, At: time.Now()}}, true
	})
	c := start(t, src, func(cfg *admin.Config) { cfg.Control = fakeControl{} }).dial(t)
	ctx := t.Context()
	code := func(err error) codes.Code { return status.Code(err) }

	h, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: "rev.example"})
	if err != nil || len(h.GetRevisions()) != 2 || h.GetRevisions()[0].GetRolledBack() == "" || !h.GetPin().GetAuto() {
		t.Errorf("ListRevisions = %v, %v", h, err)
	}
	if _, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: "other"}); code(err) != codes.NotFound {
		t.Errorf("ListRevisions of an unknown type: %v, want NotFound", err)
	}
	if _, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{}); code(err) != codes.InvalidArgument {
		t.Errorf("ListRevisions without a type: %v, want InvalidArgument", err)
	}
	if r, err := c.Rollback(ctx, &adminv1.RollbackRequest{PluginType: "rev.example", Sha256: "12"}); err != nil || r.GetRevision().GetSha256() != "ab12" {
		t.Errorf("Rollback = %v, %v", r, err)
	}
	if _, err := c.Rollback(ctx, &adminv1.RollbackRequest{PluginType: "other"}); code(err) != codes.NotFound {
		t.Errorf("Rollback of an unknown type: %v, want NotFound", err)
	}
	if _, err := c.ClearPin(ctx, &adminv1.ClearPinRequest{PluginType: "rev.example"}); code(err) != codes.NotFound {
		t.Errorf("ClearPin of a type not pinned: %v, want NotFound", err)
	}
	if _, err := c.SetShadow(ctx, &adminv1.SetShadowRequest{PluginType: "rev.example", Candidate: "/bad.wasm"}); code(err) != codes.InvalidArgument {
		t.Errorf("SetShadow of a bad candidate: %v, want InvalidArgument", err)
	}
}

// TestRevisionRPCsWithoutControl: a server without a Control changes nothing.
func TestRevisionRPCsWithoutControl(t *testing.T) {
	c := start(t, &admintest.Source{}, nil).dial(t)
	if _, err := c.Rollback(t.Context(), &adminv1.RollbackRequest{PluginType: "rev.example"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Rollback without a Control: %v, want Unimplemented", err)
	}
}
