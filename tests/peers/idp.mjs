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
//
// Access tokens requested with a `resource` the config knows are JWTs (typ at+jwt, aud = the
// resource's audience); without a resource they are opaque (introspect them). The built-in login
// and consent forms (devInteractions) accept any login name as the subject. RFC 8414
// /.well-known/oauth-authorization-server is served as an alias of the OpenID discovery document.
// Prints exactly one line `ready <issuer>` on stdout once listening; everything else goes to stderr.

import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

import Provider, { errors } from 'oidc-provider';

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

const configuration = {
  jwks: config.jwks,
  clients: config.clients ?? [],
  scopes: config.scopes ?? ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  claims: { openid: ['sub'] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  clientDefaults: { id_token_signed_response_alg: alg },
  async findAccount(_ctx, id) {
    return { accountId: id, async claims() { return { sub: id }; } };
  },
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    introspection: { enabled: true },
    revocation: { enabled: true },
    clientCredentials: { enabled: true },
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
provider.on('server_error', (_ctx, err) => process.stderr.write(`server_error: ${err?.stack ?? err}\n`));

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
