#!/usr/bin/env node
// Receives N messages from a trio-dispatch router with rhea (auto-accepting them).
//
//   node recv.js --url amqp://127.0.0.1:PORT --address ADDR --count N
//                [--timeout SECONDS] [--credit C] [--dynamic]
//
// With --dynamic the receiver asks for a dynamic source (--address is then
// optional and ignored) and, once the router has assigned the address, prints
//   {"dynamic_address": "..."}
// as the first stdout line.  When the receiving link is attached it also
// writes "recv.js: attached ..." to stderr, which the test harness waits for.
//
// Finally prints one JSON line on stdout:
//   {"received": n, "ids": [...message ids in arrival order...], "bodies_ok": true}
// bodies_ok is false if any body was not the string send.js makes for that
// message id.  Exit status 0 once N messages arrived, 1 on error or timeout
// (still printing what it had).
'use strict';

const container = require('rhea').create_container();




function bodyOk(id, body) {
    if (typeof body !== 'string') return false;
    return body === makeBody(id) || body === makeBody(id, body.length);
}

function jsonId(id) {
    if (Buffer.isBuffer(id)) return id.toString('hex');
    if (typeof id === 'bigint') return id.toString();
    if (id !== null && typeof id === 'object') return String(id);
    return id === undefined ? null : id;
}

const {parseOptions, makeBody, describe} = require('./common');

const {opts, usage} = parseOptions(process.argv.slice(2), {
    script: 'recv.js',
    usageLine: '--url URL --address ADDR --count N [--timeout SECONDS] [--credit C] [--dynamic]',
    flags: ['dynamic'],
    valued: ['url', 'address', 'count', 'timeout', 'credit'],
    defaults: {dynamic: false, credit: 100},
});
if (!opts.address && !opts.dynamic) usage('--address is required (or --dynamic)');
opts.credit = Number.parseInt(opts.credit, 10);
if (!(opts.credit > 0)) usage('--credit must be a positive integer');
const url = new URL(opts.url);

const result = {received: 0, ids: [], bodies_ok: true};
const errors = [];
let finished = false;
let closing = false;

function finish(ok) {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    for (const e of errors) process.stderr.write(`recv.js: ${e}\n`);
    process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(ok ? 0 : 1));
}


const timer = setTimeout(() => {
    errors.push(`timeout after ${opts.timeout}s with ${result.received}/${opts.count} messages`);
    finish(false);
}, opts.timeout * 1000);

function maybeDone(connection) {
    if (closing || result.received < opts.count) return;
    closing = true;
    connection.close(); // the accepts go out before the close frame
    setTimeout(() => finish(true), 2000).unref();
}

container.on('connection_open', (context) => {
    const source = opts.dynamic ? {dynamic: true} : {address: opts.address};
    context.connection.open_receiver({source, credit_window: opts.credit, autoaccept: true});
});

container.on('receiver_open', (context) => {
    const source = context.receiver.source || {};
    if (opts.dynamic) {
        process.stdout.write(JSON.stringify({dynamic_address: source.address === undefined ? null : source.address}) + '\n');
    }
    process.stderr.write(`recv.js: attached (source ${source.address})\n`);
    maybeDone(context.connection); // --count 0
});

container.on('message', (context) => {
    if (closing) return;
    const msg = context.message;
    result.received++;
    result.ids.push(jsonId(msg.message_id));
    if (!bodyOk(msg.message_id, msg.body)) result.bodies_ok = false;
    maybeDone(context.connection);
});

container.on('receiver_error', (context) => {
    errors.push(`receiver detached: ${describe(context.receiver.error)}`);
});
container.on('receiver_close', () => {
    if (!closing) {
        errors.push('receiver detached by peer');
        finish(false);
    }
});
container.on('connection_error', (context) => {
    errors.push(`connection closed: ${describe(context.connection.error)}`);
});
container.on('connection_close', () => {
    if (!closing) errors.push('connection closed by peer');
    finish(closing);
});
container.on('disconnected', (context) => {
    if (!closing) errors.push(`disconnected: ${describe(context.error)}`);
    finish(closing);
});
container.on('error', (err) => {
    errors.push(describe(err));
    finish(false);
});

container.connect({
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(url.port || 5672),
    reconnect: false,
    idle_time_out: 0,
});
