#!/usr/bin/env node
// Starts this package's MCP server (dist/index.js) behind mcp-cancel-proxy,
// from the proxy's npm package (a dependency: npm installs the binary for
// the user's machine), with mcp-cancel-proxy.yaml beside package.json as
// its policy when there is one. stdin, stdout and stderr are the proxy's;
// the server is the proxy's child. An MCP client's configuration then says
// `"command": "npx", "args": ["-y", "@your-org/your-server"]`.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.join(__dirname, '..');
const proxy = require.resolve('mcp-cancel-proxy/bin/mcp-cancel-proxy.js');
const policy = path.join(root, 'mcp-cancel-proxy.yaml');
const args = [proxy];
if (fs.existsSync(policy)) args.push(`--config=${policy}`);
args.push('--', process.execPath, path.join(root, 'dist', 'index.js'), ...process.argv.slice(2));

const child = spawn(process.execPath, args, { stdio: 'inherit' });
if (process.platform !== 'win32') {
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
}
child.on('exit', (code, signal) => {
  process.exit(code !== null ? code : 128 + (os.constants.signals[signal] || 0));
});
