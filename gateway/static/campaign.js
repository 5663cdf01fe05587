// The campaign review page: a filter or sort chosen asks the server for the matching variants
// (page 1 of them); a creative's button enlarges it.
(() => {
  const controls = document.getElementById("controls");
  for (const s of controls.querySelectorAll("select")) {
    s.addEventListener("change", () => controls.submit());
  }
  const dialog = document.getElementById("large");
  for (const b of document.querySelectorAll("button.enlarge")) {
    b.addEventListener("click", () => {
      dialog.querySelector("img").src = b.dataset.src;
      dialog.showModal();
    });
  }
})();
