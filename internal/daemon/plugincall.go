package daemon

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
)

// pluginCallPolicy confines plugin_call: a handler may call only its own plugin, at the socket
// it registered from or at an endpoint under a prefix the operator allows for its type
// (handlers.types.<T>.pluginCallEndpoints), and never one of the daemon's own sockets. A
// plugin names its endpoint in GetInfo, so without this it could steer a handler granted
// plugin_call to any socket on the node. Symlinks are resolved first, and the resolved path
// is what is dialled. An endpoint may be a path or a unix:// URL (unix:///path, unix:/path),
// as CSI drivers often name theirs.
func pluginCallPolicy(cfg config.Config) func(pluginType, socket, endpoint string) (string, error) {
	own := []string{cfg.AdminSocket()}
	if p, ok := strings.CutPrefix(cfg.Metrics.Listen, "unix:"); ok {
		own = append(own, p)
	}
	return func(pluginType, socket, endpoint string) (string, error) {
		path, err := registrar.UnixPath(endpoint)
		if err != nil {
			return "", fmt.Errorf("plugin_call to endpoint %s refused: %w", endpoint, err)
		}
		resolved, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", fmt.Errorf("plugin_call to endpoint %s: %w", endpoint, err)
		}
		for _, o := range own {
			if r, err := filepath.EvalSymlinks(o); err == nil && r == resolved {
				return "", fmt.Errorf("plugin_call to endpoint %s refused: it is one of the daemon's own sockets", endpoint)
			}
		}
		if r, err := filepath.EvalSymlinks(socket); err == nil && r == resolved {
			return resolved, nil
		}
		for _, prefix := range cfg.Handlers.Types[pluginType].PluginCallEndpoints {
			dir, err := registrar.UnixPath(prefix)
			if err != nil {
				continue // refused by the config's validation
			}
			if r, err := filepath.EvalSymlinks(dir); err == nil {
				dir = r
			}
			if strings.HasPrefix(resolved, strings.TrimSuffix(dir, "/")+"/") {
				return resolved, nil
			}
		}
		return "", fmt.Errorf("plugin_call to endpoint %s refused: it is neither the plugin's own socket (%s) nor under a prefix allowed for type %s (handlers.types.%s.pluginCallEndpoints)",
			endpoint, socket, pluginType, pluginType)
	}
}
