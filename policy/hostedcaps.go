package policy

import (
	"encoding/json"
	"strings"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// What hosting tasks changes in what the server and the client say of
// themselves: the capabilities, the tools' task support, the task member
// of a call's params.

// declaresTasks reports whether a request declares 2026-07-28's tasks
// extension in its _meta's client capabilities.
func declaresTasks(m *framing.Message) bool {
	meta := m.MetaSpan // only _meta is read, where the parse found it: never the call's arguments
	return meta.Found() && len(field(m.Raw[meta.Start:meta.End], metaClientCaps, "extensions", extTasks)) > 0
}

// Keys of 2026-07-28's _meta and of its tasks extension.
const (
	metaClientCaps  = "io.modelcontextprotocol/clientCapabilities"
	metaProtocolRev = "io.modelcontextprotocol/protocolVersion"
	extTasks        = "io.modelcontextprotocol/tasks"
)

// withoutTask returns params without its task member, for the server,
// which runs the tool plainly, and that member (what the client asked of
// its task).
func withoutTask(params json.RawMessage) (out, task []byte, ok bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(params, &obj) != nil {
		return nil, nil, false
	}
	task = obj["task"]
	for k := range obj { // and any spelling of it a server that ignores case would read
		if strings.EqualFold(k, "task") {
			delete(obj, k)
		}
	}
	// Nor does it learn that the client takes tasks (2026-07-28): it runs
	// the call plainly for the proxy.
	var meta map[string]json.RawMessage
	if json.Unmarshal(obj["_meta"], &meta) == nil && meta[metaClientCaps] != nil {
		var caps map[string]json.RawMessage
		var exts map[string]json.RawMessage
		if json.Unmarshal(meta[metaClientCaps], &caps) == nil && json.Unmarshal(caps["extensions"], &exts) == nil && exts[extTasks] != nil {
			delete(exts, extTasks)
			caps["extensions"], _ = json.Marshal(exts)
			meta[metaClientCaps], _ = json.Marshal(caps)
			obj["_meta"], _ = json.Marshal(meta)
		}
	}
	out, err := json.Marshal(obj)
	return out, task, err == nil
}

// RewriteResult implements proxy.Rewriter: the server's answer to
// initialize declares tasks, and its tools/list says that the tools of
// task: host rules support them.
func (g *governor) RewriteResult(c *proxy.Call, m *framing.Message) []byte {
	switch c.Method() {
	case framing.MethodInitialize:
		return declareTasks(field(m.Raw, "result"))
	case "tools/list":
		return g.markTaskTools(field(m.Raw, "result"))
	case "server/discover":
		return g.declareTasksExtension(field(m.Raw, "result"))
	}
	return nil
}

// declareTasksExtension adds 2026-07-28's tasks extension to a
// server/discover result's capabilities, and notes whether the server
// declared it itself (then it runs its tasks, and nothing is hosted).
func (g *governor) declareTasksExtension(res json.RawMessage) []byte {
	return editObject(res, []string{"capabilities", "extensions"}, func(exts map[string]json.RawMessage) bool {
		if exts[extTasks] != nil {
			g.e.tasksExt.Store(true)
			return false
		}
		exts[extTasks] = json.RawMessage(`{}`)
		return true
	})
}

// runsTasksExt reports whether the server runs 2026-07-28's tasks
// extension itself, as any session learned (requests without a session,
// each with a governor of its own, ask the one server): then its tasks
// are relayed, and nothing is hosted.
func (g *governor) runsTasksExt() bool { return g.e.tasksExt.Load() }

// declareTasks adds to an initialize result's capabilities what hosting
// tasks serves: tasks.list, tasks.cancel and tasks.requests.tools.call.
func declareTasks(res json.RawMessage) []byte {
	out := editObject(res, []string{"capabilities", "tasks"}, func(tasks map[string]json.RawMessage) bool {
		for _, k := range []string{"list", "cancel"} {
			if tasks[k] == nil {
				tasks[k] = json.RawMessage(`{}`)
			}
		}
		return true
	})
	return editObject(out, []string{"capabilities", "tasks", "requests", "tools"}, func(tools map[string]json.RawMessage) bool {
		if tools["call"] == nil {
			tools["call"] = json.RawMessage(`{}`)
		}
		return true
	})
}

// editObject edits the object at path in doc, a JSON object, with edit,
// making the objects on the way where they are missing, and returns doc
// encoded anew; nil when doc or one on the way is not an object, or edit
// reports nothing to change.
func editObject(doc json.RawMessage, path []string, edit func(map[string]json.RawMessage) bool) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil || obj == nil {
		return nil
	}
	if len(path) == 0 {
		if !edit(obj) {
			return nil
		}
	} else {
		inner := obj[path[0]]
		if len(inner) == 0 || string(inner) == "null" {
			inner = json.RawMessage(`{}`)
		}
		if obj[path[0]] = editObject(inner, path[1:], edit); obj[path[0]] == nil {
			return nil
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return b
}

// markTaskTools marks, in a tools/list result, the tools of task: host
// rules as supporting tasks, and notes those the server runs as tasks
// itself (never hosted twice).
func (g *governor) markTaskTools(res json.RawMessage) []byte {
	var obj map[string]json.RawMessage
	var tools []map[string]json.RawMessage
	if json.Unmarshal(res, &obj) != nil || json.Unmarshal(obj["tools"], &tools) != nil {
		return nil
	}
	mt := g.e.m.Load()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tool := range tools {
		var name string
		json.Unmarshal(tool["name"], &name)
		var exec map[string]json.RawMessage
		json.Unmarshal(tool["execution"], &exec)
		var support string
		json.Unmarshal(exec["taskSupport"], &support)
		if g.serverTasks && (support == "optional" || support == "required") {
			if g.serverTools == nil {
				g.serverTools = map[string]bool{}
			}
			g.serverTools[name] = true // relayed, as the server's own
			continue
		}
		if !mt.match("tools/call", name).TaskHost {
			continue
		}
		if exec == nil {
			exec = map[string]json.RawMessage{}
		}
		exec["taskSupport"] = json.RawMessage(`"optional"`)
		tool["execution"], _ = json.Marshal(exec)
	}
	obj["tools"], _ = json.Marshal(tools)
	b, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return b
}
