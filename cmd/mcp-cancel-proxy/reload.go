package main

import (
	"bytes"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// settle is how long the file's folder must be quiet before a change is
// read: editors write a file in several steps, and a ConfigMap's update is
// a burst of renames.
const settle = 100 * time.Millisecond

// reloadOnChange reloads the policy from the configuration file when the
// file changes (watched through its folder, so that an editor's
// rename-and-replace and a Kubernetes ConfigMap's symlink swap are seen),
// and on SIGHUP where there is one. A change is validated first; on error
// the policy in force stays, and the error is logged; requests in flight
// keep the rule they started with. The returned function stops it.
func reloadOnChange(path string, e *policy.Engine, log *zap.Logger) (stop func()) {
	done := make(chan struct{})
	changed := watchFile(path, log)
	last, _ := os.ReadFile(path)
	started, _ := config.Load(path) // what runs: a change outside the policy waits for a restart
	go func() {
		for {
			select {
			case <-reloads: // SIGHUP (signals.go); never on Windows
				if path == "" {
					log.Warn("SIGHUP: no configuration file to reload (no --config)")
					continue
				}
				last, _ = reload(path, e, log, "SIGHUP", nil, started)
			case <-changed:
				last, _ = reload(path, e, log, "the configuration file changed", last, started)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// reload loads the file and puts its policy in force, unless the file
// reads as it did (prev, when not nil), or holds no setting at all (a file
// being rewritten in place, `cat new > file`, is empty for a moment: an
// empty file is valid, and would put the defaults in force); it returns
// what it read, and whether it reloaded. Settings outside the policy that
// differ from those the proxy started with (started) are named in a
// warning: they apply only from the next start.
func reload(path string, e *policy.Engine, log *zap.Logger, why string, prev []byte, started config.Config) ([]byte, bool) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil && prev != nil && bytes.Equal(data, prev):
		return prev, false // touched, not changed
	case err == nil && config.Empty(data):
		log.Warn(why+": the configuration file holds no setting (being rewritten?); the policy in force stays",
			zap.String("config", path))
		return data, false
	}
	cfg, err := config.Load(path)
	if err != nil {
		log.Error(why+": the configuration is invalid; the policy in force stays", zap.Error(err))
		return data, false
	}
	log.Info(why+": reloading the policy", zap.String("config", path))
	e.Reload(cfg.Policy)
	if keys := config.Unreloaded(started, cfg); len(keys) > 0 {
		log.Warn(why+": settings outside the policy changed; they are read only at start, so the proxy goes on with the old ones until it is restarted",
			zap.Strings("settings", keys))
	}
	return data, true
}

// watchFile returns a channel that receives once the folder holding path
// has been quiet for settle after a change; nil (never ready) when there
// is no file or it cannot be watched.
func watchFile(path string, log *zap.Logger) <-chan struct{} {
	if path == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(filepath.Dir(path))
	}
	if err != nil {
		log.Warn("the configuration file is not watched: reload it with SIGHUP", zap.Error(err))
		if w != nil {
			w.Close()
		}
		return nil
	}
	out := make(chan struct{}, 1)
	go func() { // for the process's life, like the file
		quiet := time.NewTimer(time.Hour)
		quiet.Stop()
		for {
			select {
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				quiet.Reset(settle)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("watching the configuration file", zap.Error(err))
			case <-quiet.C:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}
