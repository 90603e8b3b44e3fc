// A kubelet registration plugin served by Node.js @grpc/grpc-js (test/interop/package.json;
// npm ci in test/interop installs it).
//
// It serves pluginregistration.Registration (GetInfo, NotifyRegistrationStatus) on a unix
// socket with a service definition of raw byte handlers and protobuf encoded by hand (no
// generated code), and reports what it is told as JSON lines on stdout, as stacks/plugin.py
// does:
//
//   {"event":"ready","grpc":"1.14.7"}
//   {"event":"notify","registered":true,"error":""}
//
// The options make it behave as the plugins test/interop checks wasmhost against.
'use strict';

const http2 = require('http2');
const { parseArgs } = require('util');

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    type: { type: 'string' },
    name: { type: 'string' },
    endpoint: { type: 'string', default: '' },
    versions: { type: 'string', default: 'v1' },
    window: { type: 'string', default: '0' }, // HTTP/2 stream window to advertise; 0: Node's default
    gzip: { type: 'boolean', default: false }, // ask grpc-js to compress (it does not compress answers)
    'header-bytes': { type: 'string', default: '0' },
    'trailer-bytes': { type: 'string', default: '0' },
  },
});
for (const required of ['socket', 'type', 'name']) {
  if (!args[required]) {
    console.error(`--${required} is required`);
    process.exit(2);
  }
}

// grpc-js has no option for the window a server advertises: give Node's HTTP/2 server the
// setting as grpc-js creates it.
const window = Number(args.window);
if (window > 0) {
  const createServer = http2.createServer;
  http2.createServer = (options, ...rest) =>
    createServer({ ...options, settings: { ...(options && options.settings), initialWindowSize: window } }, ...rest);
}
const grpc = require('@grpc/grpc-js');

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

function fieldBytes(num, value) {
  const data = Buffer.from(value, 'utf8');
  return Buffer.concat([varint((num << 3) | 2), varint(data.length), data]);
}

// PluginInfo: type = 1, name = 2, endpoint = 3, supported_versions = 4 (repeated).
function encodeInfo() {
  const parts = [fieldBytes(1, args.type), fieldBytes(2, args.name)];
  if (args.endpoint) parts.push(fieldBytes(3, args.endpoint));
  for (const v of args.versions.split(',')) if (v) parts.push(fieldBytes(4, v));
  return Buffer.concat(parts);
}

function readVarint(b, i) {
  let n = 0;
  let mul = 1;
  for (;;) {
    const c = b[i++];
    n += (c & 0x7f) * mul;
    if (c < 0x80) return [n, i];
    mul *= 128;
  }
}

// RegistrationStatus: plugin_registered = 1 (bool), error = 2 (string).
function decodeStatus(b) {
  let registered = false;
  let error = '';
  let i = 0;
  while (i < b.length) {
    let tag;
    [tag, i] = readVarint(b, i);
    const num = tag >>> 3;
    const typ = tag & 7;
    if (typ === 0) {
      let v;
      [v, i] = readVarint(b, i);
      if (num === 1) registered = v !== 0;
    } else if (typ === 2) {
      let n;
      [n, i] = readVarint(b, i);
      if (num === 2) error = b.subarray(i, i + n).toString('utf8');
      i += n;
    } else {
      throw new Error(`unexpected wire type ${typ}`);
    }
  }
  return { registered, error };
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

const headerBytes = Number(args['header-bytes']);
const trailerBytes = Number(args['trailer-bytes']);

function answer(call, callback, response) {
  if (headerBytes > 0) {
    const md = new grpc.Metadata();
    md.set('x-big', 'h'.repeat(headerBytes));
    call.sendMetadata(md);
  }
  let trailers;
  if (trailerBytes > 0) {
    trailers = new grpc.Metadata();
    trailers.set('x-big', 't'.repeat(trailerBytes));
  }
  callback(null, response, trailers);
}

const raw = (b) => b;
const method = (name) => ({
  path: `/pluginregistration.Registration/${name}`,
  requestStream: false,
  responseStream: false,
  requestSerialize: raw,
  requestDeserialize: raw,
  responseSerialize: raw,
  responseDeserialize: raw,
});
const service = { GetInfo: method('GetInfo'), NotifyRegistrationStatus: method('NotifyRegistrationStatus') };

const info = encodeInfo();
const options = {};
if (args.gzip) options['grpc.default_compression_algorithm'] = 2; // gzip
const server = new grpc.Server(options);
server.addService(service, {
  GetInfo(call, callback) {
    emit('getinfo', {});
    answer(call, callback, info);
  },
  NotifyRegistrationStatus(call, callback) {
    emit('notify', decodeStatus(call.request));
    answer(call, callback, Buffer.alloc(0));
  },
});
server.bindAsync(`unix:${args.socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) {
    console.error(`bind ${args.socket}: ${err.message}`);
    process.exit(1);
  }
  emit('ready', { grpc: require('@grpc/grpc-js/package.json').version });
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => server.tryShutdown(() => process.exit(0)));
}
