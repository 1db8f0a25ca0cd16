// SCRAM-SHA-256 and SCRAM-SHA-512 client mechanisms for rhea (RFC 5802; RFC 7677 names SCRAM-SHA-256,
// SCRAM-SHA-512 is the same construction with SHA-512).
//
// rhea 3 ships PLAIN, ANONYMOUS, EXTERNAL and XOAUTH2 clients only. Its connection option `sasl_mechanisms`
// takes a map of mechanism name -> factory of an object with `start(callback)` and
// `step(challenge, callback)` (node_modules/rhea/lib/sasl.js, SaslClient), so a SCRAM client plugs in
// without changing rhea:
//
//     const scram = require('./scram.js');
//     container.connect({..., sasl_mechanisms: scram.mechanisms(rhea, 'alice', 'secret')});
//
// The exchange (RFC 5802 section 3 and 5):
//     client-first  n,,n=USER,r=CNONCE                      (sasl-init initial-response)
//     server-first  r=CNONCE+SNONCE,s=SALT,i=ITERATIONS     (sasl-challenge)
//     client-final  c=biws,r=CNONCE+SNONCE,p=PROOF          (sasl-response)
//     server-final  v=SERVER-SIGNATURE                      (sasl-outcome additional-data, or a challenge)
//
// The client must check the server signature: it proves the server holds the ServerKey for this user, not
// only the StoredKey an attacker could have read from a users file (RFC 5802 section 9). AMQP 1.0 (section
// 5.3.3.6) carries that last message in the sasl-outcome's additional-data, which rhea's SaslClient reads
// but never hands to the mechanism, so `mechanisms()` also wraps rhea's SaslClient.on_sasl_outcome (reached
// through the public `rhea.sasl` property) to give a mechanism with `outcome()` the final say: a success
// outcome whose signature is missing or wrong fails the login like a refusal.
'use strict';

const crypto = require('crypto');

// Mechanism name -> node hash name.
const HASHES = {'SCRAM-SHA-256': 'sha256', 'SCRAM-SHA-512': 'sha512'};
// No channel binding and no authorization identity (RFC 5802 section 7, gs2-header "n,,").
const GS2_HEADER = 'n,,';
// 18 random bytes = 24 base64 characters of client nonce (RFC 5802 only asks for a unique one).
const NONCE_BYTES = 18;
// RFC 7677 section 4: "the iteration count ... SHOULD be at least 4096". A server (or a man in the middle)
// asking for fewer makes an overheard exchange cheaper to guess the password from, so the client refuses.
const MIN_ITERATIONS = 4096;
// One PBKDF2 of this many iterations takes about a second: a server must not make the client spin longer.
const MAX_ITERATIONS = 1000000;

// RFC 5802 section 5.1: "=" and "," in a user name travel as "=3D" and "=2C".
function saslname(name) {
    return name.replace(/=/g, '=3D').replace(/,/g, '=2C');
}

// "a=1,b=2" -> {a: '1', b: '2'} (values may contain "="); throws on an attribute without "=".
function parseAttributes(text) {
    const attrs = {};
    const order = [];
    for (const part of text.split(',')) {
        if (part.length < 2 || part[1] !== '=') throw new Error(`malformed attribute ${JSON.stringify(part)}`);
        attrs[part[0]] = part.slice(2);
        order.push(part[0]);
    }
    return {attrs, order};
}

// Standard base64 (RFC 4648 section 4) only: node's decoder silently skips bad characters.
function strictBase64(text, what) {
    const bytes = Buffer.from(text, 'base64');
    if (!text || bytes.toString('base64') !== text) throw new Error(`${what} is not base64`);
    return bytes;
}

function hmac(hash, key, data) {
    return crypto.createHmac(hash, key).update(data).digest();
}

/**
 * One SCRAM login as the client (a fresh object per connection attempt: rhea calls the factory each time).
 * `options.nonce` fixes the client nonce, for checking against the RFC 7677 test vector only.
 */
class ScramClient {
    constructor(mechanism, username, password, options = {}) {
        if (!HASHES[mechanism]) throw new Error(`unsupported mechanism ${mechanism}`);
        this.mechanism = mechanism;
        this.hash = HASHES[mechanism];
        this.username = username;
        // RFC 5802 section 2.2 asks for SASLprep (RFC 4013), whose normalisation step is NFKC: that is what
        // the server side of this project applies (wire/users.py normalize_password), so both agree.
        this.password = Buffer.from(String(password).normalize('NFKC'), 'utf8');
        this.clientNonce = options.nonce || crypto.randomBytes(NONCE_BYTES).toString('base64');
        this.state = 'initial';
        this.expectedServerSignature = undefined;
    }

    // rhea: the sasl-init initial response.
    start(callback) {
        this.clientFirstBare = `n=${saslname(this.username)},r=${this.clientNonce}`;
        this.state = 'sent-first';
        callback(undefined, Buffer.from(GS2_HEADER + this.clientFirstBare, 'utf8'));
    }

    // rhea: a sasl-challenge. The first is the server-first message; a second one (a server that sends its
    // final message as a challenge rather than in the outcome) is verified and answered with nothing.
    step(challenge, callback) {
        try {
            const text = Buffer.from(challenge || []).toString('utf8');
            if (this.state === 'sent-first') {
                callback(undefined, Buffer.from(this.clientFinal(text), 'utf8'));
            } else if (this.state === 'sent-final') {
                this.verifyServerFinal(text);
                callback(undefined, Buffer.alloc(0));
            } else {
                throw new Error(`unexpected challenge in state ${this.state}`);
            }
        } catch (e) {
            this.state = 'failed';
            callback(`${this.mechanism}: ${e.message}`);
        }
    }

    // Called (through the wrapper installed by mechanisms()) on a successful sasl-outcome with its
    // additional-data. Returns an error text when the server has not proved itself, else undefined.
    outcome(additionalData) {
        try {
            if (this.state === 'sent-final') {
                if (!additionalData || additionalData.length === 0) {
                    throw new Error('the server reported success without its signature');
                }
                this.verifyServerFinal(Buffer.from(additionalData).toString('utf8'));
            } else if (this.state !== 'verified') {
                throw new Error(`the server reported success before the exchange ended (state ${this.state})`);
            }
            return undefined;
        } catch (e) {
            this.state = 'failed';
            return `${this.mechanism}: ${e.message}`;
        }
    }

    clientFinal(serverFirst) {
        const {attrs, order} = parseAttributes(serverFirst);
        if (order[0] === 'm') throw new Error('the server asks for an extension this client does not know (m=)');
        if (order[0] !== 'r' || order[1] !== 's' || order[2] !== 'i') {
            throw new Error(`server-first-message is not r=...,s=...,i=...: ${JSON.stringify(serverFirst)}`);
        }
        const nonce = attrs.r;
        if (!nonce.startsWith(this.clientNonce) || nonce.length === this.clientNonce.length) {
            throw new Error('the server nonce does not extend the client nonce');
        }
        const salt = strictBase64(attrs.s, 'salt');
        if (!/^[0-9]{1,10}$/.test(attrs.i)) throw new Error(`iteration count ${JSON.stringify(attrs.i)} is not a number`);
        const iterations = Number(attrs.i);
        if (iterations < MIN_ITERATIONS || iterations > MAX_ITERATIONS) {
            throw new Error(`iteration count ${iterations} is outside ${MIN_ITERATIONS}..${MAX_ITERATIONS}`);
        }
        const keyLength = crypto.createHash(this.hash).digest().length;
        // RFC 5802 section 3: Hi() is PBKDF2 with HMAC-H as its pseudo-random function.
        const saltedPassword = crypto.pbkdf2Sync(this.password, salt, iterations, keyLength, this.hash);
        const clientKey = hmac(this.hash, saltedPassword, 'Client Key');
        const storedKey = crypto.createHash(this.hash).update(clientKey).digest();
        const serverKey = hmac(this.hash, saltedPassword, 'Server Key');
        const withoutProof = `c=${Buffer.from(GS2_HEADER, 'utf8').toString('base64')},r=${nonce}`;
        const authMessage = `${this.clientFirstBare},${serverFirst},${withoutProof}`;
        const clientSignature = hmac(this.hash, storedKey, authMessage);
        const proof = Buffer.alloc(clientKey.length);
        for (let i = 0; i < proof.length; i++) proof[i] = clientKey[i] ^ clientSignature[i];
        this.expectedServerSignature = hmac(this.hash, serverKey, authMessage);
        this.state = 'sent-final';
        return `${withoutProof},p=${proof.toString('base64')}`;
    }

    verifyServerFinal(serverFinal) {
        const {attrs, order} = parseAttributes(serverFinal);
        if (order[0] === 'e') throw new Error(`the server refused: ${attrs.e}`);
        if (order[0] !== 'v') throw new Error(`server-final-message is not v=...: ${JSON.stringify(serverFinal)}`);
        const signature = strictBase64(attrs.v, 'server signature');
        const expected = this.expectedServerSignature;
        if (signature.length !== expected.length || !crypto.timingSafeEqual(signature, expected)) {
            throw new Error('wrong server signature: the server does not know this user\'s ServerKey');
        }
        this.state = 'verified';
    }
}

// rhea's SaslClient ignores the additional-data of a successful outcome; let a mechanism that wants it
// (ours) check it first. Installed once per rhea module; other mechanisms behave exactly as before.
function installOutcomeCheck(rhea) {
    const proto = rhea.sasl.Client.prototype;
    if (proto.on_sasl_outcome.scramChecked) return;
    const original = proto.on_sasl_outcome;
    const SASL_OK = 0;
    const checked = function (frame) {
        if (frame.performative.code === SASL_OK && this.mechanism && typeof this.mechanism.outcome === 'function') {
            const error = this.mechanism.outcome(frame.performative.additional_data);
            if (error) {
                this.failed = true;
                this.transport.write_complete = true;
                this.connection.sasl_failed(error);
                return;
            }
        }
        original.call(this, frame);
    };
    checked.scramChecked = true;
    proto.on_sasl_outcome = checked;
}

/**
 * The `sasl_mechanisms` map for a rhea connection: SCRAM-SHA-512 and SCRAM-SHA-256 (or only `names`)
 * logging in as `username`. rhea uses the first mechanism the server offers that the map has.
 */
function mechanisms(rhea, username, password, names = ['SCRAM-SHA-512', 'SCRAM-SHA-256']) {
    installOutcomeCheck(rhea);
    const map = {};
    for (const name of names) map[name] = () => new ScramClient(name, username, password);
    return map;
}

module.exports = {ScramClient, mechanisms, installOutcomeCheck, MIN_ITERATIONS, MAX_ITERATIONS};
