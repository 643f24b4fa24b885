'use strict';
// Preload: force every TCP listen() in this Node process onto a loopback host.
// Usage: node --require /path/force-loopback.cjs app.js ...
//    or: NODE_OPTIONS="--require /path/force-loopback.cjs" npx some-server
// Host defaults to 127.0.0.1; override with FORCE_LISTEN_HOST (must be loopback).
// Unix-socket / pipe paths and pre-opened handles/fds are passed through untouched.
// Works for ESM programs too (--require preloads run before the ESM loader).
const net = require('node:net');
const dns = require('node:dns');

const HOST = process.env.FORCE_LISTEN_HOST || '127.0.0.1';
const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/i;
if (!LOOPBACK.test(HOST)) {
  throw new Error(`force-loopback: FORCE_LISTEN_HOST=${HOST} is not a loopback address`);
}
const origListen = net.Server.prototype.listen;

function isPipeName(v) {
  return typeof v === 'string' && !/^\s*\d+\s*$/.test(v);
}

net.Server.prototype.listen = function patchedListen(...args) {
  const cb = typeof args[args.length - 1] === 'function' ? args.pop() : undefined;
  const a0 = args[0];
  let opts;
  if (a0 !== null && typeof a0 === 'object') {
    // listen(handle) / listen({fd}) / listen({path}) -> leave alone
    if (a0._handle || a0.fd !== undefined || a0.path !== undefined || typeof a0.listen === 'function') {
      return origListen.apply(this, cb ? [...args, cb] : args);
    }
    opts = { ...a0 };
    if (!(typeof opts.host === 'string' && LOOPBACK.test(opts.host))) opts.host = HOST;
  } else if (isPipeName(a0)) {
    return origListen.apply(this, cb ? [...args, cb] : args); // listen(path)
  } else {
    // listen([port[, host[, backlog]]])
    opts = { port: a0 === undefined || a0 === null ? 0 : a0 };
    const host = typeof args[1] === 'string' ? args[1] : undefined;
    opts.host = host && LOOPBACK.test(host) ? host : HOST;
    const backlog = typeof args[1] === 'number' ? args[1] : typeof args[2] === 'number' ? args[2] : undefined;
    if (backlog !== undefined) opts.backlog = backlog;
  }
  if (process.env.FORCE_LISTEN_DEBUG) {
    process.stderr.write(`[force-loopback] listen ${JSON.stringify({ port: opts.port, host: opts.host })}\n`);
  }
  // With an explicit host, Node resolves it via dns.lookup() (async even for IP
  // literals), so server.address() would be null right after listen(). Apps that
  // call listen(0) and read address() synchronously (e.g. the conformance mock
  // servers) would break. Resolve IP literals synchronously during this call.
  const origLookup = dns.lookup;
  dns.lookup = function syncIpLookup(hostname, options, callback) {
    const fam = net.isIP(hostname);
    if (fam) {
      const cbk = typeof options === 'function' ? options : callback;
      const all = options !== null && typeof options === 'object' && options.all;
      // Node >= 22 calls lookup(host, {all:true}, cb(err, [{address, family}]));
      // older Node calls lookup(host, cb(err, address, family)).
      if (all) cbk(null, [{ address: hostname, family: fam }]);
      else cbk(null, hostname, fam);
      return {};
    }
    return origLookup.apply(this, arguments);
  };
  try {
    return cb ? origListen.call(this, opts, cb) : origListen.call(this, opts);
  } finally {
    dns.lookup = origLookup;
  }
};
