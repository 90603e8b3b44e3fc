package admin

import (
	"encoding/base64"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Pages of a list (ListPlugins, ListHandlers): at most pageSize entries (defaultPageSize when
// the request says 0, at most maxPageSize) and about maxPageBytes encoded, at least one entry.
// A token is the key of the last entry sent, encoded, so the next page starts after it
// whatever changed in between.
const (
	defaultPageSize = 1000
	maxPageSize     = 10000
	maxPageBytes    = 1 << 20
)

// page returns the entries of items (sorted by key) after the one token names, converted, and
// the token of the next page ("" after the last).
func page[T any, P proto.Message](items []T, key func(T) string, conv func(T) P, size int32, token string) ([]P, string, error) {
	if size < 0 {
		return nil, "", status.Errorf(codes.InvalidArgument, "page_size: %d is negative", size)
	}
	n := int(size)
	if n == 0 {
		n = defaultPageSize
	}
	n = min(n, maxPageSize)
	start := 0
	if token != "" {
		after, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return nil, "", status.Error(codes.InvalidArgument, "page_token: not a token this server gave (pass the next_page_token of the previous answer)")
		}
		start, _ = slices.BinarySearchFunc(items, string(after), func(t T, k string) int { return strings.Compare(key(t), k) })
		if start < len(items) && key(items[start]) == string(after) {
			start++
		}
	}
	out := make([]P, 0, min(n, len(items)-start))
	bytes := 0
	i := start
	for ; i < len(items) && len(out) < n; i++ {
		p := conv(items[i])
		sz := proto.Size(p)
		if len(out) > 0 && bytes+sz > maxPageBytes {
			break
		}
		out = append(out, p)
		bytes += sz
	}
	next := ""
	if i < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(key(items[i-1])))
	}
	return out, next, nil
}
