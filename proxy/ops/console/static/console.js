// The console's entry: signing in, and which page the address's #fragment names
// (#/ the conversations, #/?cursor=C a later page, #/c/ID one conversation). The fragment never
// holds a credential: those stay in this tab's sessionStorage (api.js).

import { ApiError, api, call, forgetSession, remember, session } from "./api.js";
import { conversationPage } from "./conversation.js";
import { h, status } from "./dom.js";
import { listPage } from "./list.js";

const main = () => document.getElementById("main");

function show(title, ...content) {
  const root = main();
  const heading = h("h1", { tabindex: "-1" }, title);
  root.replaceChildren(heading, ...content);
  document.title = `${title} · Compaction proxy console`;
  heading.focus(); // a new page is announced, and Tab goes on from its top
}

function signInPage(problem) {
  const field = (id, label, hint, attrs = {}) =>
    h("p", { class: "field" },
      h("label", { for: id }, label),
      h("input", { id, type: "password", autocomplete: "off", spellcheck: "false", "aria-describedby": `${id}-hint`, ...attrs }),
      h("span", { class: "hint", id: `${id}-hint` }, hint));
  // No input has a name and the form posts nowhere (form-action 'none'): whatever happens,
  // a credential never ends up in an address.
  const form = h("form", { method: "post", class: "sign-in", novalidate: true },
    field("token", "Admin token", "admin.token of the proxy's config.", { required: true }),
    field("key", "Tenant's API key", "The key the tenant's clients send; its conversations are shown."),
    field("tenant", "Or a tenant id", "Only with admin.cross_tenant: true.", { type: "text" }),
    h("p", { class: "error", id: "sign-in-error", role: "alert" }, problem || ""),
    h("button", { type: "submit" }, "Open the console"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const credentials = {
      token: form.querySelector("#token").value.trim(),
      key: form.querySelector("#key").value.trim(),
      tenant: form.querySelector("#tenant").value.trim(),
    };
    const error = form.querySelector("#sign-in-error");
    if (!credentials.token) {
      error.textContent = "Enter the admin token.";
      return;
    }
    try {
      await call("conversations?limit=1", { credentials }); // checked before anything is kept
    } catch (problem) {
      error.textContent = problem instanceof ApiError && problem.status === 401
        ? "The admin token was refused."
        : problem.message;
      return;
    }
    remember(credentials);
    route();
  });
  show("Sign in", h("p", {}, "The console reads the proxy's admin API with these credentials. " +
    "They are kept in this tab only, until you sign out or close it."), form);
  form.querySelector("#token").focus();
}

function signedIn(who) {
  const line = document.getElementById("who");
  line.textContent = who.tenant ? `tenant ${who.tenant}` : who.key ? "tenant of the key given" : "";
  line.hidden = false;
  document.getElementById("sign-out").hidden = false;
}

function signOut(reason) {
  forgetSession();
  document.getElementById("who").hidden = true;
  document.getElementById("sign-out").hidden = true;
  status("");
  if (location.hash) history.replaceState(null, "", location.pathname);
  signInPage(reason);
}

async function route() {
  const who = session();
  if (!who) return signOut();
  signedIn(who);
  const hash = location.hash.slice(1) || "/";
  try {
    if (hash.startsWith("/c/")) {
      await conversationPage(decodeURIComponent(hash.slice(3)), { show, api });
    } else {
      const cursor = new URLSearchParams(hash.split("?")[1] || "").get("cursor");
      await listPage(cursor, { show, api });
    }
    performance.mark("console-page-drawn"); // what tests/bench/bench_console.py times
  } catch (problem) {
    if (problem instanceof ApiError && problem.status === 401) return signOut("The admin token was refused.");
    show("Something went wrong", h("p", { class: "error", role: "alert" }, problem.message),
      h("p", {}, h("a", { href: "#/" }, "Back to the conversations")));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("sign-out").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", route);
  route();
});
