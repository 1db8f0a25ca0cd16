#!/usr/bin/env node
// Sends N messages to a trio-dispatch router with rhea and reports the outcomes.
//
//   node send.js --url amqp://127.0.0.1:PORT --address ADDR --count N
//                [--size BYTES] [--presettled] [--anonymous] [--timeout SECONDS]
//
// Message i has message_id i (an AMQP ulong) and a string body: "m<i>" by
// default, or with --size a string of exactly BYTES characters that starts
// with "m<i>:" and is padded with "x" (recv.js checks both forms).
//
// Prints exactly one JSON line on stdout:
//   {"sent": N, "accepted": a, "rejected": r, "released": rl, "modified": m, "errors": [...]}
// Exit status 0 when every message was sent (and, unless --presettled, every
// outcome arrived); 1 on a connection/link error or on timeout, still printing
// the counts it had.
'use strict';

const container = require('rhea').create_container();




const {parseOptions, makeBody, describe} = require('./common');

const {opts, usage} = parseOptions(process.argv.slice(2), {
    script: 'send.js',
    usageLine: '--url URL --address ADDR --count N [--size BYTES] [--presettled] [--anonymous] [--timeout SECONDS]',
    flags: ['presettled', 'anonymous'],
    valued: ['url', 'address', 'count', 'size', 'timeout'],
    defaults: {presettled: false, anonymous: false},
});
if (!opts.address) usage('--address is required');
if (opts.size !== undefined) {
    opts.size = Number.parseInt(opts.size, 10);
    if (!(opts.size >= 0)) usage('--size must be a non-negative integer');
}
const url = new URL(opts.url);

const result = {sent: 0, accepted: 0, rejected: 0, released: 0, modified: 0, errors: []};
let finished = false;

function finish(ok) {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    const code = ok ? 0 : 1;
    process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(code));
}


const timer = setTimeout(() => {
    result.errors.push(`timeout after ${opts.timeout}s`);
    finish(false);
}, opts.timeout * 1000);

function settledCount() {
    return result.accepted + result.rejected + result.released + result.modified;
}

// Once everything is done, close the connection cleanly (which also flushes
// any presettled transfers still buffered) and report on connection_close.
let closing = false;
function maybeDone(connection) {
    if (closing) return;
    const done = opts.presettled ? result.sent === opts.count
                                 : settledCount() === opts.count;
    if (!done) return;
    closing = true;
    connection.close();
    // Do not hang forever if the peer never answers the close.
    setTimeout(() => finish(true), 2000).unref();
}

container.on('connection_open', (context) => {
    const senderOpts = opts.anonymous ? {target: {}} : {target: {address: opts.address}};
    if (opts.presettled) senderOpts.snd_settle_mode = 1;
    context.connection.open_sender(senderOpts);
    maybeDone(context.connection); // --count 0
});

container.on('sendable', (context) => {
    const sender = context.sender;
    while (!closing && result.sent < opts.count && sender.sendable()) {
        const i = result.sent;
        const msg = {message_id: i, body: makeBody(i, opts.size)};
        if (opts.anonymous) msg.to = opts.address;
        sender.send(msg);
        result.sent++;
    }
    maybeDone(context.connection);
});

container.on('accepted', (context) => { result.accepted++; maybeDone(context.connection); });
container.on('released', (context) => { result.released++; maybeDone(context.connection); });
container.on('modified', (context) => { result.modified++; maybeDone(context.connection); });
container.on('rejected', (context) => {
    result.rejected++;
    const state = context.delivery && context.delivery.remote_state;
    if (state && state.error) result.errors.push(`rejected: ${describe(state.error)}`);
    maybeDone(context.connection);
});

container.on('sender_error', (context) => {
    result.errors.push(`sender detached: ${describe(context.sender.error)}`);
});
container.on('sender_close', (context) => {
    if (!closing) {
        if (!context.sender.error) result.errors.push('sender detached by peer');
        finish(false);
    }
});
container.on('connection_error', (context) => {
    result.errors.push(`connection closed: ${describe(context.connection.error)}`);
});
container.on('connection_close', () => {
    if (!closing) result.errors.push('connection closed by peer');
    finish(closing);
});
container.on('disconnected', (context) => {
    if (!closing) {
        result.errors.push(`disconnected: ${describe(context.error)}`);
        finish(false);
    } else {
        finish(true);
    }
});
container.on('error', (err) => {
    result.errors.push(describe(err));
    finish(false);
});

container.connect({
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(url.port || 5672),
    reconnect: false,
    idle_time_out: 0,
});
