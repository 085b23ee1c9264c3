// Sign-in for the console on AWS: the Cognito hosted UI, authorization code + PKCE (S256).
// Tokens live in sessionStorage (one tab, gone when it closes); every API call sends
// `Authorization: Bearer <id token>`. Nothing here runs in local mode.

export interface AuthConfig {
  domain: string; // the hosted UI's domain, e.g. "stepcrawl-dev.auth.eu-west-1.amazoncognito.com"
  client_id: string;
  redirect_uri: string;
  scopes?: string[] | string;
}

interface Tokens {
  id_token: string;
  access_token?: string;
  refresh_token?: string;
  expires_at: number; // epoch ms
}

const TOKENS = "stepcrawl.auth.tokens";
const PENDING = "stepcrawl.auth.pending"; // {state, verifier, return_to} while at the hosted UI

function base(domain: string): string {
  const d = domain.replace(/\/+$/, "");
  return /^https?:\/\//.test(d) ? d : `https://${d}`;
}

function scopes(cfg: AuthConfig): string {
  const s = cfg.scopes ?? ["openid", "email"];
  return Array.isArray(s) ? s.join(" ") : s;
}

function b64url(bytes: Uint8Array): string {
  let s = "";
  bytes.forEach((b) => (s += String.fromCharCode(b)));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random(n: number): string {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

async function challenge(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return b64url(new Uint8Array(digest));
}

function load(): Tokens | null {
  try {
    const t = JSON.parse(sessionStorage.getItem(TOKENS) ?? "null") as Tokens | null;
    return t && t.id_token ? t : null;
  } catch {
    return null;
  }
}

function store(body: Record<string, unknown>, previous?: Tokens | null): Tokens {
  const t: Tokens = {
    id_token: String(body.id_token ?? previous?.id_token ?? ""),
    access_token: (body.access_token as string | undefined) ?? previous?.access_token,
    refresh_token: (body.refresh_token as string | undefined) ?? previous?.refresh_token,
    expires_at: Date.now() + Number(body.expires_in ?? 3600) * 1000,
  };
  sessionStorage.setItem(TOKENS, JSON.stringify(t));
  return t;
}

async function tokenRequest(cfg: AuthConfig, params: Record<string, string>): Promise<Record<string, unknown>> {
  const r = await fetch(`${base(cfg.domain)}/oauth2/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: cfg.client_id, ...params }).toString(),
  });
  const body = (await r.json().catch(() => ({}))) as Record<string, unknown>;
  if (!r.ok) throw new Error(`sign-in failed: ${String(body.error ?? r.status)}`);
  return body;
}

/** Go to the hosted UI; the page comes back to redirect_uri with ?code=&state=. */
export async function signIn(cfg: AuthConfig): Promise<never> {
  const state = random(16);
  const verifier = random(48);
  sessionStorage.setItem(
    PENDING,
    JSON.stringify({ state, verifier, return_to: location.hash || "" }),
  );
  const q = new URLSearchParams({
    response_type: "code",
    client_id: cfg.client_id,
    redirect_uri: cfg.redirect_uri,
    scope: scopes(cfg),
    state,
    code_challenge_method: "S256",
    code_challenge: await challenge(verifier),
  });
  location.assign(`${base(cfg.domain)}/oauth2/authorize?${q}`);
  return new Promise<never>(() => {});
}

/**
 * The id token to send, signing in first when needed: finishes a redirect back from the hosted
 * UI (exchanges the code), refreshes an expired token, else redirects to the hosted UI.
 */
export async function idToken(cfg: AuthConfig): Promise<string> {
  const url = new URL(location.href);
  const code = url.searchParams.get("code");
  const state = url.searchParams.get("state");
  const pending = JSON.parse(sessionStorage.getItem(PENDING) ?? "null") as
    | { state: string; verifier: string; return_to: string }
    | null;
  if (code && pending && state === pending.state) {
    sessionStorage.removeItem(PENDING);
    url.searchParams.delete("code");
    url.searchParams.delete("state");
    history.replaceState(null, "", url.pathname + url.search + (pending.return_to || url.hash));
    const body = await tokenRequest(cfg, {
      grant_type: "authorization_code",
      code,
      redirect_uri: cfg.redirect_uri,
      code_verifier: pending.verifier,
    });
    return store(body).id_token;
  }
  const t = load();
  if (t && t.expires_at - 60_000 > Date.now()) return t.id_token;
  if (t?.refresh_token) {
    try {
      return store(await tokenRequest(cfg, { grant_type: "refresh_token", refresh_token: t.refresh_token }), t)
        .id_token;
    } catch {
      /* fall through to a new sign-in */
    }
  }
  return signIn(cfg);
}

/** Forget the tokens (the API answered 401) so the next idToken() signs in again. */
export function forget(): void {
  sessionStorage.removeItem(TOKENS);
}

/** Sign out of the hosted UI too (its /logout needs redirect_uri among the client's sign-out URLs). */
export function signOut(cfg: AuthConfig): void {
  forget();
  const q = new URLSearchParams({ client_id: cfg.client_id, logout_uri: cfg.redirect_uri });
  location.assign(`${base(cfg.domain)}/logout?${q}`);
}

/** The signed-in user's e-mail or user name, from the id token's claims (display only). */
export function userName(): string | null {
  const t = load();
  if (!t) return null;
  try {
    const claims = JSON.parse(atob(t.id_token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return claims.email ?? claims["cognito:username"] ?? null;
  } catch {
    return null;
  }
}
