// Stand-in grants of the delegation flows, on top of oidc-provider (tests/peers/idp.mjs loads
// this file when its config has `grants`). No installable program issues ID-JAGs or answers
// Microsoft Entra ID's on-behalf-of request, so we wrote these ourselves; everything around them
// (the login, the ID and access tokens, the keys, client authentication at the token endpoint)
// is oidc-provider's own.
//
// grants (in CONFIG.json):
//   onBehalfOf  {tenant, assertionAudience, scopes: {SCOPE: {audience, scope, accessTokenTTL}}}
//               Entra ID's OBO request at /<tenant>/oauth2/v2.0/token (an alias of /token):
//               grant_type jwt-bearer, requested_token_use=on_behalf_of, `assertion` an access
//               token (at+jwt) this provider issued whose aud holds assertionAudience (the
//               middle tier's), `scope` one key of `scopes`; by a confidential client. Issues an
//               at+jwt for that scope's audience, sub = the assertion's.
//   idJag       {clientId, ttl}  the enterprise IdP of Cross-App Access
//               (draft-ietf-oauth-identity-assertion-authz-grant): a token exchange with
//               requested_token_type id-jag of an ID token this provider issued to the calling
//               client (subject_token_type id_token) for an ID-JAG: a JWT (typ oauth-id-jag+jwt,
//               this provider's key) with iss, sub, aud = the `audience` asked, client_id =
//               `clientId` (the client at that audience's authorization server), jti, iat, exp,
//               and `resource`/`scope` when asked; answered with issued_token_type id-jag and
//               token_type N_A.
//   jwtBearer   {trustedIssuers: [{issuer, jwksUri}], audience, scope, accessTokenTTL}  the
//               resource's authorization server of Cross-App Access: the JWT-bearer grant of an
//               ID-JAG (typ oauth-id-jag+jwt) of a trusted issuer, verified with its keys, whose
//               aud is this issuer and whose client_id is the authenticated client, for an at+jwt
//               of `audience`, sub = the ID-JAG's, scope = the asked (a subset of `scope`).
// A refusal is invalid_grant / invalid_scope / invalid_target / invalid_request, as RFC 6749.
// Test-only routes: GET /test/grants {obo, idJag, jwtBearer}: grants answered; POST
// /test/grants-mode {mode: "ok"|"fail"}: "fail" answers these grants 500 server_error.

import { randomUUID } from 'node:crypto';

import * as jose from 'jose';
import { errors } from 'oidc-provider';

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const ID_TOKEN = 'urn:ietf:params:oauth:token-type:id_token';
export const ID_JAG = 'urn:ietf:params:oauth:token-type:id-jag';
const ID_JAG_TYP = 'oauth-id-jag+jwt';

function invalidGrant(description) {
  const err = new errors.InvalidGrant();
  err.error_description = description; // InvalidGrant's description is fixed otherwise
  return err;
}

async function verified(token, keys, options, what) {
  try {
    return (await jose.jwtVerify(token, keys, { requiredClaims: ['exp', 'sub'], ...options })).payload;
  } catch (err) {
    throw invalidGrant(`${what} did not verify: ${err.code ?? err.name}`);
  }
}

// Registers the configured grants; returns {idJag: handler} for the token-exchange grant of
// idp.mjs to call on requested_token_type id-jag.
export function registerGrants(provider, grants, { ownKeys, signingKey, alg, defaultTTL }) {
  const stats = { obo: 0, idJag: 0, jwtBearer: 0 };
  const behaviour = { mode: 'ok' };
  const failing = (ctx) => {
    if (behaviour.mode !== 'fail') return false;
    ctx.status = 500;
    ctx.body = { error: 'server_error', error_description: 'the grant is failing (test mode "fail")' };
    return true;
  };
  const confidential = (client) => {
    if (client.clientAuthMethod === 'none') throw new errors.InvalidClient('a confidential client is required');
  };

  async function issue(ctx, subject, { audience, scope, accessTokenTTL }) {
    const ttl = accessTokenTTL ?? defaultTTL;
    const token = new provider.AccessToken({
      accountId: String(subject), client: ctx.oidc.client, gty: JWT_BEARER, scope: scope || undefined,
      resourceServer: { audience, scope, accessTokenTTL: ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg } } },
      expiresIn: ttl,
    });
    ctx.oidc.entity('AccessToken', token);
    const value = await token.save();
    ctx.body = { access_token: value, token_type: 'Bearer', expires_in: token.expiration, scope: token.scope };
  }

  async function onBehalfOf(ctx) {
    const { client, params } = ctx.oidc;
    const obo = grants.onBehalfOf;
    confidential(client);
    if (!params.assertion) throw new errors.InvalidRequest("missing required parameter 'assertion'");
    const target = obo.scopes[params.scope ?? ''];
    if (!target) throw new errors.InvalidScope(`unknown scope ${params.scope}`);
    const { typ } = jose.decodeProtectedHeader(params.assertion);
    if (typ !== 'at+jwt') throw invalidGrant('the assertion is not an access token of this issuer');
    const claims = await verified(params.assertion, ownKeys, { issuer: provider.issuer, audience: obo.assertionAudience },
      'the assertion');
    stats.obo += 1;
    await issue(ctx, claims.sub, { audience: target.audience, scope: target.scope ?? '', accessTokenTTL: target.accessTokenTTL });
  }

  const trusted = new Map((grants.jwtBearer?.trustedIssuers ?? []).map(({ issuer, jwksUri }) => [
    issuer, jose.createRemoteJWKSet(new URL(jwksUri), { timeoutDuration: 5000 }),
  ]));
  async function idJagBearer(ctx) {
    const { client, params } = ctx.oidc;
    const rules = grants.jwtBearer;
    confidential(client);
    if (!params.assertion) throw new errors.InvalidRequest("missing required parameter 'assertion'");
    let header;
    let unverified;
    try {
      header = jose.decodeProtectedHeader(params.assertion);
      unverified = jose.decodeJwt(params.assertion);
    } catch {
      throw invalidGrant('the assertion is not a JWT');
    }
    if (header.typ !== ID_JAG_TYP) throw invalidGrant(`the assertion's typ is not ${ID_JAG_TYP}`);
    const keys = trusted.get(unverified.iss);
    if (!keys) throw invalidGrant(`the ID-JAG's issuer ${unverified.iss} is not trusted`);
    const claims = await verified(params.assertion, keys, { issuer: unverified.iss, audience: provider.issuer },
      'the ID-JAG');
    if (claims.client_id !== client.clientId) throw invalidGrant('the ID-JAG was issued for another client');
    const offered = (rules.scope ?? '').split(' ').filter(Boolean);
    const asked = (params.scope ?? claims.scope ?? rules.scope ?? '').split(' ').filter(Boolean);
    const unknown = asked.filter((scope) => !offered.includes(scope));
    if (unknown.length) throw new errors.InvalidScope(`not offered: ${unknown.join(' ')}`);
    stats.jwtBearer += 1;
    await issue(ctx, claims.sub, { audience: rules.audience, scope: asked.join(' '), accessTokenTTL: rules.accessTokenTTL });
  }

  async function jwtBearer(ctx) {
    if (failing(ctx)) return;
    if (ctx.oidc.params.requested_token_use === 'on_behalf_of' && grants.onBehalfOf) {
      await onBehalfOf(ctx);
    } else if (ctx.oidc.params.requested_token_use === undefined && grants.jwtBearer) {
      await idJagBearer(ctx);
    } else {
      throw new errors.InvalidRequest('this JWT-bearer grant is not offered here');
    }
  }
  if (grants.onBehalfOf || grants.jwtBearer) {
    provider.registerGrantType(JWT_BEARER, jwtBearer, ['assertion', 'scope', 'requested_token_use']);
  }

  // The token-exchange grant's id-jag branch (idp.mjs registers the grant and calls this).
  async function idJag(ctx) {
    if (failing(ctx)) return;
    const { client, params } = ctx.oidc;
    confidential(client);
    if (params.subject_token_type !== ID_TOKEN) {
      throw new errors.InvalidRequest('an ID-JAG is issued for an ID token (subject_token_type id_token)');
    }
    if (!params.audience) throw new errors.InvalidTarget("missing required parameter 'audience'");
    if (jose.decodeProtectedHeader(params.subject_token).typ === 'at+jwt') {
      throw invalidGrant('the subject token is an access token, not an ID token');
    }
    const subject = await verified(params.subject_token, ownKeys,
      { issuer: provider.issuer, audience: client.clientId }, 'the ID token');
    const ttl = grants.idJag.ttl ?? 300;
    const claims = { sub: subject.sub, client_id: grants.idJag.clientId, jti: randomUUID() };
    if (params.resource) claims.resource = params.resource;
    if (params.scope) claims.scope = params.scope;
    const jag = await new jose.SignJWT(claims)
      .setProtectedHeader({ alg, typ: ID_JAG_TYP, kid: signingKey.kid })
      .setIssuer(provider.issuer).setAudience(params.audience)
      .setIssuedAt().setExpirationTime(`${ttl}s`)
      .sign(await jose.importJWK(signingKey, alg));
    stats.idJag += 1;
    ctx.body = { access_token: jag, issued_token_type: ID_JAG, token_type: 'N_A', expires_in: ttl, ...(params.scope ? { scope: params.scope } : {}) };
  }

  provider.use(async (ctx, next) => {
    if (grants.onBehalfOf && ctx.path === `/${grants.onBehalfOf.tenant}/oauth2/v2.0/token`) {
      ctx.path = '/token';
    }
    if (ctx.path === '/test/grants' && ctx.method === 'GET') {
      ctx.body = stats;
    } else if (ctx.path === '/test/grants-mode' && ctx.method === 'POST') {
      const chunks = [];
      for await (const chunk of ctx.req) chunks.push(chunk);
      const mode = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}').mode;
      if (!['ok', 'fail'].includes(mode)) {
        ctx.status = 400;
        ctx.body = { error: 'expected {"mode": "ok"|"fail"}' };
        return;
      }
      behaviour.mode = mode;
      ctx.body = behaviour;
    } else {
      await next();
    }
  });
  return { idJag: grants.idJag ? idJag : null };
}
