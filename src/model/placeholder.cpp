// placeholder so the component has a source; remove when the component has real files
