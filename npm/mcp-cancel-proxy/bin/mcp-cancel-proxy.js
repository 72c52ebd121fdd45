#!/usr/bin/env node
// The npm launcher of mcp-cancel-proxy: it runs the binary that npm
// installed for this machine (the optional dependency
// @mcp-cancel-proxy/<platform>-<arch>, chosen by its os and cpu fields),
// with this process's stdin, stdout and stderr, passes on the signals that
// stop or reload it, and exits as the binary did.
//
// MCP_CANCEL_PROXY_BINARY, if set, names the binary to run instead.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');

// The platforms a binary is published for, as Node names them.
const platforms = [
  'darwin-arm64', 'darwin-x64', 'freebsd-x64', 'linux-arm64', 'linux-x64', 'win32-arm64', 'win32-x64',
];

// binaryPackage returns the package and the path inside it of the binary
// for a platform and architecture, or null when none is published.
function binaryPackage(platform, arch) {
  const key = `${platform}-${arch}`;
  if (!platforms.includes(key)) return null;
  const exe = platform === 'win32' ? 'mcp-cancel-proxy.exe' : 'mcp-cancel-proxy';
  return { name: `@mcp-cancel-proxy/${key}`, file: `bin/${exe}` };
}

// exitCode maps how the binary ended to the launcher's exit code, for when
// the launcher cannot end by the same signal: 128 + the signal's number,
// as a shell reports it.
function exitCode(code, signal) {
  if (code !== null) return code;
  return 128 + (os.constants.signals[signal] || 0);
}

// forwarded lists the signals passed on to the binary. On Windows a
// console's Ctrl-C reaches every process attached to it, the binary
// included, and there is nothing else to pass on: the launcher ignores it
// and waits for the binary to stop.
function forwarded(platform) {
  return platform === 'win32' ? [] : ['SIGINT', 'SIGTERM', 'SIGHUP'];
}

function fail(msg) {
  process.stderr.write(`mcp-cancel-proxy: ${msg}\n`);
  process.exit(1);
}

function resolveBinary() {
  if (process.env.MCP_CANCEL_PROXY_BINARY) return process.env.MCP_CANCEL_PROXY_BINARY;
  const pkg = binaryPackage(process.platform, process.arch);
  if (!pkg) {
    fail(`no binary is published for ${process.platform}-${process.arch} (there are: ${platforms.join(', ')}); ` +
      'build it from a clone of the source with Go 1.26: go install ./cmd/mcp-cancel-proxy, ' +
      'then set MCP_CANCEL_PROXY_BINARY to the binary (or run it directly)');
  }
  try {
    return require.resolve(`${pkg.name}/${pkg.file}`);
  } catch {
    fail(`${pkg.name}, the package holding this machine's binary, is not installed: it is an optional ` +
      'dependency, which npm skips when told to omit optional dependencies (--omit=optional, ' +
      '--no-optional); install again without that option');
  }
}

function main() {
  const bin = resolveBinary();
  const child = spawn(bin, process.argv.slice(2), { stdio: 'inherit', windowsHide: true });
  const handlers = new Map();
  for (const sig of forwarded(process.platform)) {
    const h = () => child.kill(sig);
    handlers.set(sig, h);
    process.on(sig, h);
  }
  if (process.platform === 'win32') process.on('SIGINT', () => {});
  child.on('error', (err) => fail(`cannot run ${bin}: ${err.message}`));
  child.on('exit', (code, signal) => {
    if (signal) {
      // End by the same signal, so that whoever waits sees what happened.
      if (handlers.has(signal)) process.off(signal, handlers.get(signal));
      process.kill(process.pid, signal);
      setTimeout(() => process.exit(exitCode(code, signal)), 1000).unref();
      return;
    }
    process.exit(exitCode(code, signal));
  });
}

if (require.main === module) {
  main();
} else {
  module.exports = { binaryPackage, exitCode, forwarded, platforms };
}
