// The single-page app of index.html (read its header for how to serve it). Plain
// browser JavaScript, no build step, no dependencies. Every text that comes from the
// API (minion ids, grains, job returns) goes into the page as text, never as HTML.
"use strict";

(function () {
  let token = null;

  function setState(state) {
    document.body.dataset.state = state;
  }

  function fail(err) {
    document.getElementById("error").textContent = String(err && err.message ? err.message : err);
    setState("error");
  }

  // One API call: JSON in and out, the session token in X-Auth-Token.
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (token) {
      headers["X-Auth-Token"] = token;
    }
    const init = { method: method, headers: headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (!resp.ok) {
      throw new Error(method + " " + path + ": HTTP " + resp.status);
    }
    return resp.json();
  }

  async function login(username, password, eauth) {
    setState("logging-in");
    const reply = await api("POST", "/login", {
      username: username,
      password: password,
      eauth: eauth,
    });
    token = reply["return"][0].token;
    setState("logged-in");
  }

  // GET /minions runs grains.items on every minion: one item per minion id.
  async function listMinions() {
    const reply = await api("GET", "/minions");
    const grains = reply["return"][0] || {};
    const list = document.getElementById("minions");
    list.replaceChildren();
    for (const id of Object.keys(grains).sort()) {
      const g = grains[id] || {};
      const item = document.createElement("li");
      item.dataset.minion = id;
      item.textContent = g.os ? id + " (" + g.os + " " + (g.osrelease || "") + ")" : id;
      list.appendChild(item);
    }
    setState("minions");
  }

  // POST / with one `local` chunk: one row per minion that returned.
  async function runJob(tgt, fun, arg) {
    setState("running");
    const reply = await api("POST", "/", [
      { client: "local", tgt: tgt, fun: fun, arg: arg === "" ? [] : [arg] },
    ]);
    const returns = reply["return"][0] || {};
    const rows = document.getElementById("results");
    rows.replaceChildren();
    for (const id of Object.keys(returns).sort()) {
      const ret = returns[id];
      const row = document.createElement("tr");
      row.dataset.minion = id;
      const name = document.createElement("td");
      name.textContent = id;
      const value = document.createElement("td");
      value.className = "return";
      value.textContent = typeof ret === "string" ? ret : JSON.stringify(ret);
      row.append(name, value);
      rows.appendChild(row);
    }
    setState("done");
  }

  function jobForm() {
    const f = document.getElementById("job").elements;
    return [f.tgt.value, f.fun.value, f.arg.value];
  }

  document.getElementById("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const f = ev.target.elements;
    login(f.username.value, f.password.value, f.eauth.value).then(listMinions).catch(fail);
  });

  document.getElementById("job").addEventListener("submit", function (ev) {
    ev.preventDefault();
    runJob.apply(null, jobForm()).catch(fail);
  });

  // Credentials in the fragment (#username=...&password=...&eauth=...): log in, list the
  // minions and run the job form's job at once. The fragment is cleared from the address
  // bar first.
  const given = new URLSearchParams(window.location.hash.slice(1));
  if (given.has("username")) {
    history.replaceState(null, "", window.location.pathname);
    login(given.get("username"), given.get("password") || "", given.get("eauth") || "pam")
      .then(listMinions)
      .then(function () {
        return runJob.apply(null, jobForm());
      })
      .catch(fail);
  }
})();
