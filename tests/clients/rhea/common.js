// What send.js and recv.js share: option parsing, the body convention and error text.
'use strict';

// Parses `--name value` and `--flag` options. `spec` = {script, usageLine, flags, valued, defaults}.
// Checks what both scripts need (--url, --count, --timeout); returns the options and a usage()
// function for the script's own checks. Exits with status 2 on bad usage.
function parseOptions(argv, spec) {
    function usage(msg) {
        process.stderr.write(`${spec.script}: ${msg}\n`);
        process.stderr.write(`usage: ${spec.script} ${spec.usageLine}\n`);
        process.exit(2);
    }
    const flags = new Set(spec.flags);
    const valued = new Set(spec.valued);
    const out = Object.assign({timeout: 20}, spec.defaults);
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (!arg.startsWith('--')) usage(`unexpected argument ${arg}`);
        const name = arg.slice(2);
        if (flags.has(name)) {
            out[name] = true;
        } else if (valued.has(name)) {
            if (i + 1 >= argv.length) usage(`${arg} needs a value`);
            out[name] = argv[++i];
        } else {
            usage(`unknown option ${arg}`);
        }
    }
    if (!out.url) usage('--url is required');
    if (out.count === undefined) usage('--count is required');
    out.count = Number.parseInt(out.count, 10);
    if (!(out.count >= 0)) usage('--count must be a non-negative integer');
    out.timeout = Number.parseFloat(out.timeout);
    if (!(out.timeout > 0)) usage('--timeout must be a positive number');
    return {opts: out, usage};
}

// Message i's body: "m<i>", or with a size a string of exactly that many characters that starts with
// "m<i>:" padded with "x". recv.js checks bodies against this.
function makeBody(i, size) {
    if (size === undefined) return `m${i}`;
    const prefix = `m${i}:`;
    if (prefix.length >= size) return prefix.slice(0, size);
    return prefix + 'x'.repeat(size - prefix.length);
}

function describe(err) {
    if (!err) return 'unknown error';
    if (err.condition || err.description) {
        return `${err.condition || 'error'}: ${err.description || ''}`.trim();
    }
    return String(err.message || err);
}

module.exports = {parseOptions, makeBody, describe};
