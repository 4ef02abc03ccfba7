// The tenant's conversations, most recently used first, a page at a time (the admin listing:
// each item with its ledger), with tokens, savings and last use.

import { dollars, h, tokens, when } from "./dom.js";

const PAGE = 50;

function cell(label, ...content) {
  return h("td", { "data-label": label }, ...content);
}

function row(item) {
  const ledger = item.ledger || {};
  const saved = ledger.saved;
  return h("tr", {},
    h("th", { scope: "row", "data-label": "Conversation" },
      h("a", { href: `#/c/${encodeURIComponent(item.conversation_id)}` }, item.conversation_id)),
    cell("Last used", when(item.last_used_at)),
    cell("Requests", tokens(ledger.requests)),
    cell("Tokens sent", tokens(ledger.prompt_tokens)),
    cell("Full history", tokens(ledger.full_prompt_tokens)),
    cell("Cached", tokens(ledger.cached_tokens)),
    h("td", { "data-label": "Saved", class: typeof saved === "number" && saved < 0 ? "loss" : null }, dollars(saved)),
    cell("Summaries", String(item.checkpoints)),
  );
}

export async function listPage(cursor, { show, api }) {
  const page = await api.page(cursor, PAGE);
  const items = page.data || [];
  const heading = cursor ? "Conversations (older)" : "Conversations";
  if (!items.length) {
    show(heading, h("p", { class: "empty" }, cursor
      ? "No older conversations."
      : "No conversation of this tenant is listed yet: one appears from its first stored summary on."),
    cursor ? h("p", {}, h("a", { href: "#/" }, "Newest conversations")) : null);
    return;
  }
  const columns = ["Conversation", "Last used", "Requests", "Tokens sent", "Full history", "Cached", "Saved", "Summaries"];
  const table = h("table", { class: "listing" },
    h("caption", {}, `${items.length} conversations, most recently used first. Tokens as the provider billed them; full history: what sending every message would have cost.`),
    h("thead", {}, h("tr", {}, columns.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, items.map(row)));
  const pager = h("nav", { class: "pager", "aria-label": "Pages" },
    cursor ? h("a", { href: "#/" }, "Newest conversations") : null,
    page.has_more ? h("a", { href: `#/?cursor=${encodeURIComponent(page.next_cursor)}`, rel: "next" }, "Older conversations") : null);
  show(heading, h("div", { class: "scroll" }, table), pager);
}
