// mockllm inspector, shared by the live page and the one-file report. Everything readable is already
// in the HTML (a mark is a link to its call's <details>); this only opens that call for you.
"use strict";
(function () {
  function openCall(id) {
    const call = document.getElementById(id);
    if (!call || !call.matches("details.call")) return;
    const list = call.closest("details.calls");
    if (list) list.open = true;
    document.querySelectorAll(".selected").forEach((el) => el.classList.remove("selected"));
    call.open = true;
    call.classList.add("selected");
    const run = call.closest(".run");
    const mark = run && run.querySelector('a.mark[href="#' + CSS.escape(id) + '"]');
    if (mark) mark.classList.add("selected");
    call.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest('a.mark, a.goto');
    if (!link) return;
    event.preventDefault();
    const id = link.getAttribute("href").slice(1);
    history.replaceState(null, "", "#" + id);
    openCall(id);
  });

  window.addEventListener("DOMContentLoaded", () => {
    if (location.hash.length > 1) openCall(decodeURIComponent(location.hash.slice(1)));
  });

  window.mockllmInspector = { openCall };
})();
