// Live updates while a run is in progress: refresh the fragments that name their source, or reload.
// The fragments come from this server, rendered by the same escaping templates as the pages.
"use strict";
(function () {
  for (const el of document.querySelectorAll("[data-live-src]")) {
    const src = el.getAttribute("data-live-src");
    setInterval(async function () {
      const reply = await fetch(src, { headers: { Accept: "text/html" } });
      if (reply.ok) el.innerHTML = await reply.text();
    }, 3000);
  }
  const reload = document.querySelector("[data-live-reload]");
  if (reload) {
    const seconds = Number(reload.getAttribute("data-live-reload")) || 5;
    setTimeout(function () { window.location.reload(); }, seconds * 1000);
  }
})();
