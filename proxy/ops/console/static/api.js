// The admin API as the console calls it: the operator's credentials kept for this tab only
// (sessionStorage: gone when the tab closes, never in a URL), sent as headers on every call.

const SESSION_KEY = "compaction-proxy-console";
const BASE = new URL("../", document.baseURI); // the page is /admin/ui/: the API is /admin/

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `the admin API answered ${status}`);
    this.status = status;
    this.code = error.code || null;
  }
}

export function session() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
    return saved && saved.token ? saved : null;
  } catch {
    return null;
  }
}

export function remember(credentials) {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(credentials));
}

export function forgetSession() {
  sessionStorage.removeItem(SESSION_KEY);
}

function headers(credentials) {
  const sent = { Authorization: `Bearer ${credentials.token}` };
  // The tenant named directly (honoured with admin.cross_tenant only), else the one the
  // caller's key makes, sent as the caller sends Authorization.
  if (credentials.tenant) sent["X-Tenant"] = credentials.tenant;
  if (credentials.key) {
    const key = credentials.key;
    sent["X-Caller-Authorization"] = /^bearer\s/i.test(key) ? key : `Bearer ${key}`;
  }
  return sent;
}

// A conversation's path: ids may hold "/", sent as %2F (docs/operations.md, "Ids with /").
export function conversationPath(id, ...rest) {
  return ["conversations", encodeURIComponent(id), ...rest.map(encodeURIComponent)].join("/");
}

// One call; the parsed JSON, or null for a 404 when `missing` allows it; ApiError otherwise.
export async function call(path, { method = "GET", json, missing = false, credentials } = {}) {
  const who = credentials || session();
  if (!who) throw new ApiError(401, { error: { message: "not signed in" } });
  const init = { method, headers: headers(who), cache: "no-store", credentials: "omit" };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  }
  const response = await fetch(new URL(path, BASE), init);
  const body = await response.json().catch(() => null);
  if (response.status === 404 && missing) return null;
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export const api = {
  page: (cursor, limit = 50) =>
    call(`conversations?limit=${limit}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "")),
  record: (id) => call(conversationPath(id), { missing: true }),
  ledger: async (id) => {
    const body = await call(conversationPath(id, "ledger"), { missing: true });
    return body && body.ledger;
  },
  timeline: (id) => call(conversationPath(id, "timeline"), { missing: true }),
  // What compaction removed and the proxy keeps for recall (a running summary replaced all of
  // it, with the tool results cleared); absent (404): nothing kept.
  originals: (id) => call(conversationPath(id, "originals"), { missing: true }),
  correct: (id, checkpoint, summary) =>
    call(conversationPath(id, "summary"), { method: "PATCH", json: { summary, checkpoint } }),
  restore: (id, checkpoint) =>
    call(conversationPath(id, "checkpoints", checkpoint, "restore"), { method: "POST" }),
  forget: (id) => call(conversationPath(id), { method: "DELETE" }),
};
