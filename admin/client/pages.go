package client

import (
	"context"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// ListAllPlugins returns every plugin the daemon knows, asking page after page
// (ListPluginsRequest.page_token) until the last. c is a Client or any adminv1.AdminClient.
func ListAllPlugins(ctx context.Context, c adminv1.AdminClient) ([]*adminv1.Plugin, error) {
	return all(ctx, func(ctx context.Context, token string) ([]*adminv1.Plugin, string, error) {
		resp, err := c.ListPlugins(ctx, &adminv1.ListPluginsRequest{PageToken: token})
		return resp.GetPlugins(), resp.GetNextPageToken(), err
	})
}

// ListAllHandlers returns every handler the daemon has loaded, page after page, as
// ListAllPlugins does.
func ListAllHandlers(ctx context.Context, c adminv1.AdminClient) ([]*adminv1.Handler, error) {
	return all(ctx, func(ctx context.Context, token string) ([]*adminv1.Handler, string, error) {
		resp, err := c.ListHandlers(ctx, &adminv1.ListHandlersRequest{PageToken: token})
		return resp.GetHandlers(), resp.GetNextPageToken(), err
	})
}

func all[T any](ctx context.Context, next func(context.Context, string) ([]T, string, error)) ([]T, error) {
	var out []T
	token := ""
	for {
		items, tok, err := next(ctx, token)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if tok == "" {
			return out, nil
		}
		token = tok
	}
}
