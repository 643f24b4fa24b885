// A real OpenID provider (oidc-provider, certified) for the vmcp-trio tests, on 127.0.0.1.
//
//   node tests/peers/idp.mjs CONFIG.json
//
// CONFIG.json (written by tests/fixtures/idp.py):
//   issuer          "http://127.0.0.1:PORT"
//   port            PORT
//   jwks            {keys: [...]}, a PRIVATE JWKS; the first key signs (the tests know the keys)
//   alg             JWS alg of JWT access tokens and ID tokens ("RS256" default, "ES256", "EdDSA")
//   clients         oidc-provider client metadata list
//   resources       {resource indicator URL: {audience, scope, accessTokenTTL, accessTokenFormat}}
//   accessTokenTTL  seconds, for access tokens outside a resource server (opaque ones)
//   scopes          optional; default openid offline_access mcp:tools mcp:admin
//   groups          optional; {account: ["group", ...]}: those accounts' tokens carry a `groups`
//                   claim (JWT access tokens and ID tokens), as a directory's group claim would
//   grants          optional; the on-behalf-of and ID-JAG stand-ins of grants.mjs (see there)
//   tokenResponseUser  optional; true: successful token responses also carry
//                   `authed_user: {id: <account>}`, as Slack's do (our stand-in for providers
//                   that name the user in the token response: no installable one does)
//   tokenExchange   optional; enables the RFC 8693 grant below:
//                   {trustedIssuers: [{issuer, jwksUri}],
//                    audiences: {AUDIENCE: {scope: "a b", accessTokenTTL: seconds}}}
//
// Access tokens requested with a `resource` the config knows are JWTs (typ at+jwt, aud = the
// resource's audience); without a resource they are opaque (introspect them). The built-in login
// and consent forms (devInteractions) accept any login name as the subject. RFC 8414
// /.well-known/oauth-authorization-server is served as an alias of the OpenID discovery document.
// Prints exactly one line `ready <issuer>` on stdout once listening; everything else goes to stderr.
//
// RFC 8693 token exchange (grant_type urn:ietf:params:oauth:grant-type:token-exchange) is NOT an
// oidc-provider feature: no installable program offers RFC 8693, so the grant below is a stand-in
// we wrote ourselves on top of oidc-provider's provider.registerGrantType(). With `tokenExchange`
// configured, confidential clients (client_secret_basic or client_secret_post) may exchange a
// subject token (subject_token_type access_token or id_token) for a JWT access token for one of
// the configured `audiences`. The subject token is accepted if it is
//   (a) a JWT whose `iss` is one of `trustedIssuers`, verified against that issuer's jwksUri
//       (signature, exp and sub required);
//   (b) an access token this provider issued: a JWT (typ at+jwt) verified with this provider's own
//       keys, or an opaque one it finds in its store (AccessToken or ClientCredentials);
//   (c) with subject_token_type id_token: an ID token this provider issued (its own keys).
// Anything else is invalid_grant. `audience` (required; `resource` may repeat it) must be a key of
// `audiences` (else invalid_target) and `scope` a subset of its scope (else invalid_scope; default
// all of it). The issued token is an at+jwt signed like the others: iss, sub = the subject's sub,
// aud = audience, scope, client_id = the calling client, and act {sub: client_id} (nesting the
// subject token's own act) when the client is not the subject itself. The response is RFC 8693
// 2.2.1: access_token, issued_token_type (access_token), token_type Bearer, expires_in, scope.
//
// Test-only admin routes (with tokenExchange; like everything here, on 127.0.0.1 only):
//   GET    /test/exchanges       {total, attempts, failed, byAudience, byClient, subjects}: total =
//                                tokens issued, attempts = grant requests that reached the handler,
//                                failed = 500s of "fail" mode, byClient {client: {audience: N}},
//                                subjects = the subs of the last 100 exchanges, oldest first
//   DELETE /test/exchanges       resets those counters
//   POST   /test/exchange-mode   JSON {mode: "ok"|"fail"|"slow", delaySeconds: N}: "fail" answers
//                                the grant 500 server_error, "slow" sleeps delaySeconds first

import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

import * as jose from 'jose'; // oidc-provider's own dependency
import Provider, { errors } from 'oidc-provider';

import { ID_JAG, registerGrants } from './grants.mjs';

// oidc-provider prints NOTICEs with console.info (stdout) and WARNINGs with console.warn: keep
// stdout for the ready line, and drop the known quick-start noise.
const NOISE = [
  /oidc-provider NOTICE/,
  /quick start development-only/,
  /default .* function called/,
];
const toStderr = (...args) => {
  const text = args.map(String).join(' ');
  if (!NOISE.some((re) => re.test(text))) process.stderr.write(`${text}\n`);
};
console.info = toStderr;
console.log = toStderr;
console.warn = toStderr;

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const alg = config.alg ?? 'RS256';
const resources = config.resources ?? {};
const defaultTTL = config.accessTokenTTL ?? 600;
const tokenExchange = config.tokenExchange ?? null;
const groups = config.groups ?? {};
const groupsOf = (account) => (account && Object.hasOwn(groups, account) ? groups[account] : null);
// More ID-token claims of some accounts (Entra ID's `oid`, say): {account: {claim: value}}.
const accountClaims = config.accountClaims ?? {};
const extraClaimNames = [...new Set(Object.values(accountClaims).flatMap(Object.keys))];
// This provider's public keys (before oidc-provider takes the private JWKS), for (b) and (c).
const PRIVATE_MEMBERS = new Set(['d', 'p', 'q', 'dp', 'dq', 'qi', 'k']);
const ownKeys = jose.createLocalJWKSet({
  keys: config.jwks.keys.map((key) => Object.fromEntries(
    Object.entries(key).filter(([name]) => !PRIVATE_MEMBERS.has(name)),
  )),
});

const configuration = {
  jwks: config.jwks,
  clients: config.clients ?? [],
  scopes: config.scopes ?? ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  claims: { openid: ['sub', 'groups', ...extraClaimNames] },
  conformIdTokenClaims: false, // an account's groups are in its ID token, not only at userinfo
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  clientDefaults: { id_token_signed_response_alg: alg },
  // The token-exchange grant's tokens carry extra claims (its `act`), and the tokens of accounts
  // with configured groups their `groups`; the others stay as is.
  async extraTokenClaims(_ctx, token) {
    const accountGroups = groupsOf(token.accountId);
    if (!accountGroups) return token.exchangeClaims;
    return { ...(token.exchangeClaims ?? {}), groups: accountGroups };
  },
  async findAccount(_ctx, id) {
    const accountGroups = groupsOf(id);
    return {
      accountId: id,
      async claims() {
        const extra = Object.hasOwn(accountClaims, id) ? accountClaims[id] : {};
        return accountGroups ? { ...extra, sub: id, groups: accountGroups } : { ...extra, sub: id };
      },
    };
  },
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    introspection: { enabled: true },
    revocation: { enabled: true },
    clientCredentials: { enabled: true },
    deviceFlow: { enabled: true },
    resourceIndicators: {
      enabled: true,
      async defaultResource() { return undefined; }, // no resource: an opaque access token
      async useGrantedResource() { return true; },
      async getResourceServerInfo(_ctx, indicator) {
        const server = resources[indicator];
        if (!server) throw new errors.InvalidTarget(`unknown resource indicator ${indicator}`);
        return {
          scope: server.scope ?? '',
          audience: server.audience ?? indicator,
          accessTokenTTL: server.accessTokenTTL ?? defaultTTL,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: server.alg ?? alg } },
        };
      },
    },
  },
  // PKCE (S256 only in v9) is required for public clients: oidc-provider's default policy.
  pkce: { required: (_ctx, client) => client.clientAuthMethod === 'none' },
  async issueRefreshToken(_ctx, client, code) {
    if (!client.grantTypeAllowed('refresh_token')) return false;
    return code.kind === 'AuthorizationCode' || code.scopes.has('offline_access');
  },
  // A resource server's accessTokenTTL wins (oidc-provider's TTL functions decide it).
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL || defaultTTL,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL || defaultTTL,
  },
};

const provider = new Provider(config.issuer, configuration);

provider.use(async (ctx, next) => {
  if (ctx.path === '/.well-known/oauth-authorization-server') {
    ctx.path = '/.well-known/openid-configuration';
  }
  await next();
});
// The delegation grants (on-behalf-of, ID-JAG): our stand-ins of tests/peers/grants.mjs.
const delegation = config.grants
  ? registerGrants(provider, config.grants, { ownKeys, signingKey: config.jwks.keys[0], alg, defaultTTL })
  : { idJag: null };
if (tokenExchange || delegation.idJag) registerTokenExchange(provider, tokenExchange ?? {}, delegation.idJag);
if (config.tokenResponseUser) {
  provider.use(async (ctx, next) => {
    await next();
    const entities = ctx.oidc?.entities ?? {};
    const account = entities.Account?.accountId ?? entities.AuthorizationCode?.accountId
      ?? entities.RefreshToken?.accountId;
    if (ctx.path === '/token' && ctx.status === 200 && account && ctx.body
        && typeof ctx.body === 'object') {
      ctx.body = { ...ctx.body, authed_user: { id: account } };
    }
  });
}
provider.on('server_error', (_ctx, err) => process.stderr.write(`server_error: ${err?.stack ?? err}\n`));

// --- RFC 8693 token exchange (our stand-in, see the header) -------------------------------------

function registerTokenExchange(provider, { trustedIssuers = [], audiences = {} }, idJag = null) {
  const GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
  const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
  const ID_TOKEN = 'urn:ietf:params:oauth:token-type:id_token';
  const trusted = new Map(trustedIssuers.map(({ issuer, jwksUri }) => [
    issuer, jose.createRemoteJWKSet(new URL(jwksUri), { timeoutDuration: 5000 }),
  ]));
  const stats = {
    total: 0, attempts: 0, failed: 0, byAudience: {}, byClient: {}, subjects: [],
  };
  const behaviour = { mode: 'ok', delaySeconds: 0 };

  const invalidGrant = (description) => {
    const err = new errors.InvalidGrant();
    err.error_description = description; // InvalidGrant's description is fixed otherwise
    return err;
  };
  const list = (value) => {
    if (value === undefined) return [];
    return Array.isArray(value) ? value : [value];
  };

  async function verifyJwt(token, keys, options, what) {
    try {
      const { payload } = await jose.jwtVerify(token, keys, { requiredClaims: ['exp', 'sub'], ...options });
      return payload;
    } catch (err) {
      if (err instanceof jose.errors.JWTExpired) throw invalidGrant(`${what} has expired`);
      throw invalidGrant(`${what} did not verify: ${err.code ?? err.name}: ${err.message}`);
    }
  }

  // The subject's claims (sub, act, ...) once the token is accepted; invalid_grant otherwise.
  async function subjectClaims(token, tokenType) {
    let claims;
    try {
      claims = jose.decodeJwt(token);
    } catch {
      claims = undefined; // not a JWT: maybe one of this provider's opaque access tokens
    }
    if (claims === undefined) {
      if (tokenType !== ACCESS_TOKEN) throw invalidGrant('the subject token is not a JWT');
      const found = await provider.AccessToken.find(token)
        ?? await provider.ClientCredentials.find(token);
      if (!found || found.isExpired) {
        throw invalidGrant('the subject token is neither a JWT nor an active access token of this issuer');
      }
      return { sub: found.accountId ?? found.clientId, client_id: found.clientId };
    }
    if (typeof claims.iss !== 'string') throw invalidGrant('the subject token has no iss');
    if (trusted.has(claims.iss)) {
      return verifyJwt(token, trusted.get(claims.iss), { issuer: claims.iss },
        `the subject token of trusted issuer ${claims.iss}`);
    }
    if (claims.iss !== provider.issuer) {
      throw invalidGrant(`the subject token's issuer ${claims.iss} is not trusted`);
    }
    const { typ } = jose.decodeProtectedHeader(token);
    if (tokenType === ACCESS_TOKEN && typ !== 'at+jwt') {
      throw invalidGrant('the subject token is not an access token (typ at+jwt) of this issuer');
    }
    if (tokenType === ID_TOKEN && typ === 'at+jwt') {
      throw invalidGrant('the subject token is an access token, not an ID token');
    }
    return verifyJwt(token, ownKeys, { issuer: provider.issuer }, 'the subject token of this issuer');
  }

  async function tokenExchangeHandler(ctx) {
    const { client, params } = ctx.oidc;
    if (idJag && params.requested_token_type === ID_JAG) {
      await idJag(ctx); // Cross-App Access: tests/peers/grants.mjs
      return;
    }
    stats.attempts += 1;
    if (behaviour.mode === 'slow') {
      await new Promise((resolve) => { setTimeout(resolve, behaviour.delaySeconds * 1000); });
    } else if (behaviour.mode === 'fail') {
      stats.failed += 1;
      ctx.status = 500;
      ctx.body = { error: 'server_error', error_description: 'token exchange is failing (test mode "fail")' };
      return;
    }

    if (client.clientAuthMethod === 'none') {
      throw new errors.InvalidClient('token exchange is for confidential clients only');
    }
    for (const name of ['subject_token', 'subject_token_type']) {
      if (!params[name]) throw new errors.InvalidRequest(`missing required parameter '${name}'`);
    }
    if (![ACCESS_TOKEN, ID_TOKEN].includes(params.subject_token_type)) {
      throw new errors.InvalidRequest(`unsupported subject_token_type ${params.subject_token_type}`);
    }
    if (params.requested_token_type !== undefined && params.requested_token_type !== ACCESS_TOKEN) {
      throw new errors.InvalidRequest(`unsupported requested_token_type ${params.requested_token_type}`);
    }
    if (params.actor_token !== undefined || params.actor_token_type !== undefined) {
      throw new errors.InvalidRequest('actor tokens are not supported');
    }

    const requested = list(params.audience);
    if (requested.length === 0) throw new errors.InvalidTarget("missing required parameter 'audience'");
    const targets = new Set([...requested, ...list(params.resource)]);
    for (const target of targets) {
      if (!Object.hasOwn(audiences, target)) throw new errors.InvalidTarget(`unknown audience ${target}`);
    }
    if (targets.size !== 1) throw new errors.InvalidTarget('exactly one audience is supported');
    const [audience] = targets;
    const server = audiences[audience];
    const offered = (server.scope ?? '').split(' ').filter(Boolean);
    let scopes = offered;
    if (params.scope !== undefined) {
      scopes = params.scope.split(' ').filter(Boolean);
      const unknown = scopes.filter((scope) => !offered.includes(scope));
      if (unknown.length) {
        throw new errors.InvalidScope(`audience ${audience} does not offer ${unknown.join(' ')}`);
      }
    }

    const subject = await subjectClaims(params.subject_token, params.subject_token_type);
    const token = new provider.AccessToken({
      accountId: String(subject.sub),
      client,
      gty: GRANT,
      scope: scopes.join(' ') || undefined,
      resourceServer: {
        audience,
        scope: offered.join(' '),
        accessTokenTTL: server.accessTokenTTL ?? defaultTTL,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: server.alg ?? alg } },
      },
      expiresIn: server.accessTokenTTL ?? defaultTTL,
    });
    if (String(subject.sub) !== client.clientId) { // delegation: the client acts for the subject
      token.exchangeClaims = { act: { sub: client.clientId, ...(subject.act ? { act: subject.act } : {}) } };
    }
    ctx.oidc.entity('AccessToken', token);
    const value = await token.save();

    stats.total += 1;
    stats.byAudience[audience] = (stats.byAudience[audience] ?? 0) + 1;
    const mine = (stats.byClient[client.clientId] ??= {});
    mine[audience] = (mine[audience] ?? 0) + 1;
    stats.subjects.push(String(subject.sub));
    if (stats.subjects.length > 100) stats.subjects.shift();

    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS_TOKEN,
      token_type: 'Bearer',
      expires_in: token.expiration,
      scope: token.scope,
    };
  }

  // registerGrantType(name, handler(ctx), allowed parameters, parameters that may repeat).
  provider.registerGrantType(GRANT, tokenExchangeHandler, [
    'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'audience', 'scope',
    'requested_token_type', 'resource',
  ], ['audience', 'resource']);

  const readJson = async (req) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : {};
  };
  provider.use(async (ctx, next) => {
    if (ctx.path === '/test/exchanges' && ctx.method === 'GET') {
      ctx.body = stats;
    } else if (ctx.path === '/test/exchanges' && ctx.method === 'DELETE') {
      Object.assign(stats, {
        total: 0, attempts: 0, failed: 0, byAudience: {}, byClient: {}, subjects: [],
      });
      ctx.status = 204;
    } else if (ctx.path === '/test/exchange-mode' && ctx.method === 'POST') {
      let body;
      try {
        body = await readJson(ctx.req);
      } catch {
        body = undefined;
      }
      const delay = Number(body?.delaySeconds ?? 0);
      if (!['ok', 'fail', 'slow'].includes(body?.mode) || !(delay >= 0)) {
        ctx.status = 400;
        ctx.body = { error: 'expected {"mode": "ok"|"fail"|"slow", "delaySeconds": N >= 0}' };
        return;
      }
      Object.assign(behaviour, { mode: body.mode, delaySeconds: delay });
      ctx.body = behaviour;
    } else {
      await next();
    }
  });
}

const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`ready ${config.issuer}\n`);
});
server.on('error', (err) => {
  process.stderr.write(`listen failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});

function shutdown() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
