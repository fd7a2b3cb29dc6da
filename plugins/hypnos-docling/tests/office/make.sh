#!/bin/sh
# Regenerates the Office files the tests read from their flat OpenDocument sources, with LibreOffice itself
# (Debian: libreoffice-impress-nogui, libreoffice-calc-nogui, libreoffice-writer-nogui).
set -e
cd "$(dirname "$0")"
profile="-env:UserInstallation=file://$(mktemp -d)"
soffice "$profile" --headless --convert-to pptx slides.fodp
soffice "$profile" --headless --convert-to odp slides.fodp
soffice "$profile" --headless --convert-to xlsx sheet.fods
soffice "$profile" --headless --convert-to ods sheet.fods
soffice "$profile" --headless --convert-to docx letter.fodt
soffice "$profile" --headless --convert-to odt letter.fodt
