package main

import (
	"bytes"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// settle is how long the file's folder must be quiet before a change is
// read: editors write a file in several steps, and a ConfigMap's update is
// a burst of renames.
const settle = 100 * time.Millisecond

// reloader reloads the policy from the configuration file when the file
// changes (watched through its folder, so that an editor's
// rename-and-replace and a Kubernetes ConfigMap's symlink swap are seen),
// and on SIGHUP where there is one. A change is validated first; on error
// the policy in force stays, and the error is logged; requests in flight
// keep the rule they started with. It is an actor of its mode's group: run
// watches until stop.
type reloader struct {
	path    string
	e       *policy.Engine
	log     *zap.Logger
	w       *fsnotify.Watcher // nil: the file is not watched
	last    []byte            // the file as last read
	gone    bool              // the file was missing at the last change
	started config.Config     // what runs: a change outside the policy waits for a restart
	hups    <-chan struct{}   // SIGHUPs
	quit    chan struct{}
}

// newReloader reads the file as it is at start and starts watching it.
func newReloader(path string, hups <-chan struct{}, e *policy.Engine, log *zap.Logger) *reloader {
	r := &reloader{path: path, e: e, log: log, w: watchFile(path, log), hups: hups, quit: make(chan struct{})}
	r.last, _ = os.ReadFile(path)
	r.started, _ = config.Load(path)
	return r
}

// run reloads on each SIGHUP, and once the file's folder has been quiet for
// settle after a change, until stop.
func (r *reloader) run() error {
	var changes <-chan fsnotify.Event
	var errs <-chan error
	if r.w != nil {
		defer r.w.Close()
		changes, errs = r.w.Events, r.w.Errors
	}
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	for {
		select {
		case <-r.hups:
			if r.path == "" {
				r.log.Warn("SIGHUP: no configuration file to reload (no --config)")
				continue
			}
			r.last, _ = reload(r.path, r.e, r.log, "SIGHUP", nil, r.started)
		case _, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			quiet.Reset(settle)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("watching the configuration file", zap.Error(err))
		case <-quiet.C:
			r.changed()
		case <-r.quit:
			return nil
		}
	}
}

// changed reloads the file once its folder has been quiet after a change.
// The folder is watched, not the file (an editor's save renames a new
// file onto it; a Kubernetes ConfigMap swaps a symbolic link), so any file
// beside it, the proxy's own events feed among them, wakes it: a file that
// reads as before is left alone (reload), and one that has gone is said
// once, not at each change beside it.
func (r *reloader) changed() {
	_, err := os.Stat(r.path)
	if err != nil && r.gone {
		return // said when it went
	}
	r.gone = err != nil
	r.last, _ = reload(r.path, r.e, r.log, "the configuration file changed", r.last, r.started)
}

// stop makes run return; it is the actor's interrupt.
func (r *reloader) stop(error) { close(r.quit) }

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
		log.Warn(why+": the configuration file holds no setting (being rewritten?); the policy in force stays", events.Mark(events.PolicyKept), zap.String("why", why),
			zap.String("config", path))
		return data, false
	}
	cfg, err := config.Load(path)
	if err != nil {
		log.Error(why+": the configuration is invalid; the policy in force stays", events.Mark(events.PolicyKept), zap.String("why", why), zap.Error(err))
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

// watchFile watches the folder holding path; nil when there is no file
// or it cannot be watched.
func watchFile(path string, log *zap.Logger) *fsnotify.Watcher {
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
	return w
}
