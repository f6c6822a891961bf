document.getElementById("handoff").submit();
