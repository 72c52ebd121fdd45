// Package nodepeers holds what the load drivers need to run the npm peers
// (supergateway, mcp-proxy, mcp-remote) on this machine.
package nodepeers

// LoopbackHook is a Node preload that puts a server listening on every
// interface (supergateway has no host option) on 127.0.0.1 instead.
const LoopbackHook = `const net = require('net');
const listen = net.Server.prototype.listen;
const any = new Set([undefined, null, '', '0.0.0.0', '::']);
net.Server.prototype.listen = function (...args) {
  const a = args[0];
  if (a !== null && typeof a === 'object' && a.port !== undefined && any.has(a.host)) {
    args[0] = { ...a, host: '127.0.0.1' };
  } else if ((typeof a === 'number' || /^\d+$/.test(String(a))) && (typeof args[1] !== 'string' || any.has(args[1]))) {
    const cb = typeof args[args.length - 1] === 'function' ? args[args.length - 1] : undefined;
    return listen.call(this, { port: Number(a), host: '127.0.0.1' }, cb);
  }
  return listen.apply(this, args);
};
`
